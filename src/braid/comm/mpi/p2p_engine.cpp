#include "braid/comm/mpi/p2p_engine.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <sstream>
#include <thread>

#include "braid/comm/chunking.h"
#include "braid/comm/mpi/mpi_runtime.h"
#include "braid/comm/mpi/poll_backoff.h"
#include "braid/comm/reduce_kernels.h"
#include "braid/core/error.h"

namespace braid::comm {

namespace {

constexpr int64_t kMaxMessage = int64_t{1} << 30;  // MPI counts are int: send in <= 1 GiB pieces

}  // namespace

P2pEngine::P2pEngine(MPI_Comm comm, int rank, int size, bool debug, std::function<void()> progress,
                     std::function<void(int64_t)> charge, HostLayout layout, bool allow_two_level,
                     std::shared_ptr<ProcessGroup> host_group)
    : comm_(comm),
      rank_(rank),
      size_(size),
      debug_(debug),
      progress_(std::move(progress)),
      charge_(std::move(charge)),
      layout_(std::move(layout)),
      host_group_(std::move(host_group)) {
  if (!allow_two_level || !layout_.hierarchical() || !host_group_) return;
  const int k = size_ / layout_.hosts();
  for (int r = 0; r < size_; ++r)
    if (layout_.host_of[static_cast<size_t>(r)] != r / k) return;
  per_host_ = k;
  host_ = rank_ / k;
  index_ = rank_ % k;
}

int P2pEngine::tag(const CollectiveOp& op, int phase) const {
  return static_cast<int>(op.seq % 8000) * 4 + phase;  // < 32767, the smallest MPI_TAG_UB
}

void P2pEngine::post_send(const void* data, int64_t bytes, int peer, int tag) {
  const char* p = static_cast<const char*>(data);
  do {
    int piece = static_cast<int>(std::min(bytes, kMaxMessage));
    reqs_.emplace_back();
    req_peer_.push_back(-1 - peer);
    mpi_check(MPI_Isend(p, piece, MPI_BYTE, peer, tag, comm_, &reqs_.back()), "MPI_Isend");
    p += piece;
    bytes -= piece;
  } while (bytes > 0);
}

void P2pEngine::post_recv(void* data, int64_t bytes, int peer, int tag) {
  char* p = static_cast<char*>(data);
  do {
    int piece = static_cast<int>(std::min(bytes, kMaxMessage));
    reqs_.emplace_back();
    req_peer_.push_back(peer);
    mpi_check(MPI_Irecv(p, piece, MPI_BYTE, peer, tag, comm_, &reqs_.back()), "MPI_Irecv");
    p += piece;
    bytes -= piece;
  } while (bytes > 0);
}

std::string P2pEngine::host_suffix(int r) const {
  if (layout_.host_of.empty()) return "";
  return " on host " + layout_.names[static_cast<size_t>(layout_.host_of[static_cast<size_t>(r)])];
}

bool P2pEngine::wait_until(const CollectiveOp& op, Clock::duration patience) {
  auto fail = [&](const std::string& why) {
    abandoned_.push_back(op);  // MPI may still touch its buffers
    reqs_.clear();
    req_peer_.clear();
    fold_pieces_ = 0;
    throw CommError(op.describe() + why);
  };
  std::vector<int> indices;
  Clock::time_point moved = Clock::now();  // when a request last completed
  for (uint64_t it = 0; !reqs_.empty(); ++it) {
    // Testsome, not Testall: completed requests become MPI_REQUEST_NULL, so on a timeout the
    // ones left name the ranks that never arrived.
    indices.resize(reqs_.size());  // fold_arrived posts more
    int outcount = 0;
    int rc = MPI_Testsome(static_cast<int>(reqs_.size()), reqs_.data(), &outcount, indices.data(),
                          MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, text, &len);
      fail(": MPI error: " + std::string(text, len));
    }
    const bool done = outcount == MPI_UNDEFINED;
    if (done) break;
    if (outcount > 0 && folded_ < fold_pieces_) fold_arrived(op);
    if (progress_ && it % 8 == 0) progress_();
    auto now = Clock::now();
    if (outcount > 0) moved = now;
    if (now > deadline_) {
      std::vector<int> absent, unreceived;
      for (size_t i = 0; i < reqs_.size(); ++i) {
        if (reqs_[i] == MPI_REQUEST_NULL) continue;
        int peer = req_peer_[i];
        auto& list = peer >= 0 ? absent : unreceived;
        int r = peer >= 0 ? peer : -1 - peer;
        if (std::find(list.begin(), list.end(), r) == list.end()) list.push_back(r);
      }
      std::ostringstream os;
      os.precision(3);
      os << " timed out after " << std::chrono::duration<double>(now - started_).count()
         << " s: ranks [";
      for (size_t i = 0; i < absent.size(); ++i)
        os << (i ? ", " : "") << absent[i] << host_suffix(absent[i]);
      os << "] never arrived";
      if (absent.empty()) {
        os.str("");
        os << " timed out: ranks [";
        for (size_t i = 0; i < unreceived.size(); ++i)
          os << (i ? ", " : "") << unreceived[i] << host_suffix(unreceived[i]);
        os << "] never took their data";
      }
      fail(os.str());
    }
    if (now - moved > patience) return false;
    poll_backoff(it);  // Note [Poll backoff]
  }
  reqs_.clear();
  req_peer_.clear();
  fold_pieces_ = 0;
  return true;
}

void P2pEngine::wait_all(const CollectiveOp& op) {
  wait_until(op, Clock::duration::max());
}

void P2pEngine::check_fingerprints(const CollectiveOp& op) {
  std::vector<Fingerprint> fps(size_);
  fps[rank_] = op.fingerprint();
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    post_recv(&fps[r], sizeof(Fingerprint), r, tag(op, kFingerprint));
    post_send(&fps[rank_], sizeof(Fingerprint), r, tag(op, kFingerprint));
  }
  wait_all(op);
  std::ostringstream os;
  for (int r = 1; r < size_; ++r)
    if (!(fps[r] == fps[0]))
      os << (os.tellp() > 0 ? ", " : "") << "rank " << r << " called " << fps[r].str();
  if (os.tellp() > 0)
    throw CommError(detail::concat("collective mismatch at seq ", op.seq, ": rank 0 called ",
                                   fps[0].str(), " but ", os.str()));
}

void P2pEngine::post_reduce_scatter(const CollectiveOp& op, const Tensor& data, int parts) {
  const char* in = bytes_of(data);
  const int64_t n = data.numel();
  const size_t es = dtype_size(op.in.dtype());
  const Chunk mine = chunk_of(n, parts, parts == 1 ? 0 : rank_);
  char* received = bytes_of(buffer(scratch_, static_cast<int64_t>(size_ * mine.size * es)));
  const bool inside = parts == size_ && host_part(op);
  for (int j = 0; j < size_; ++j) {
    if (j == rank_ || (inside && on_this_host(j))) continue;
    Chunk cj = chunk_of(n, parts, parts == 1 ? 0 : j);
    if (mine.size) post_recv(received + j * mine.size * es, mine.size * es, j, tag(op, kData));
    if (cj.size) post_send(in + cj.offset * es, cj.size * es, j, tag(op, kData));
  }
  if (inside) host_part_rs(data);
}

void P2pEngine::reduce_received(const CollectiveOp& op, const char* in, char* out, int64_t n,
                                int parts) {
  const DType dt = op.in.dtype();
  const size_t es = dtype_size(dt);
  const Chunk mine = chunk_of(n, parts, parts == 1 ? 0 : rank_);
  const bool inside = parts == size_ && host_part(op);
  std::vector<const void*> srcs(size_);
  for (int j = 0; j < size_; ++j)
    srcs[j] = j == rank_                  ? in + mine.offset * es
              : inside && on_this_host(j) ? bytes_of(host_recv_) + (j % per_host_) * mine.size * es
                                          : bytes_of(scratch_) + j * mine.size * es;
  reduce_ranks(srcs.data(), size_, out, nullptr, mine.size, dt, op.reduce);
}

void P2pEngine::post_all_gather(const CollectiveOp& op, const char* in, const Tensor& out, int tg) {
  const size_t es = dtype_size(op.out.dtype());
  const int64_t n = out.numel();
  const Chunk mine = chunk_of(n, size_, rank_);
  const bool inside = host_part(op);
  for (int j = 0; j < size_; ++j) {
    if (j == rank_ || (inside && on_this_host(j))) continue;
    Chunk cj = chunk_of(n, size_, j);
    if (cj.size) post_recv(bytes_of(out) + cj.offset * es, cj.size * es, j, tg);
    if (mine.size) post_send(in, mine.size * es, j, tg);
  }
  if (inside) host_part_ag(op, in, out);
}

char* P2pEngine::own_chunk(const CollectiveOp& op) const {
  return bytes_of(op.out) + chunk_of(op.out.numel(), size_, rank_).offset *
                                static_cast<int64_t>(dtype_size(op.out.dtype()));
}

void P2pEngine::keep_own_chunk(const CollectiveOp& op, const char* in, char* out, int64_t n) {
  const size_t es = dtype_size(op.out.dtype());
  const Chunk mine = chunk_of(n, size_, rank_);
  if (mine.size && out + mine.offset * es != in)
    std::memcpy(out + mine.offset * es, in, mine.size * es);
}

// Phase k's buffers: all_reduce reduces into this rank's chunk of out in place (phase 0) and
// gathers the chunks from there (phase 1).
void P2pEngine::begin_phase(const CollectiveOp& op, int k) {
  phase_ = k;
  if (chained(op)) return begin_chain(op, k);
  if (two_level(op)) return begin_host_phase(op, k);
  if (one_round(op)) return post_reduce_scatter(op, op.out, 1);
  if (op.type == OpType::all_reduce) {
    if (k == 0) return post_reduce_scatter(op, op.out, size_);
    return post_all_gather(op, own_chunk(op), op.out, tag(op, kData2));
  }
  if (op.type == OpType::reduce_scatter) return post_reduce_scatter(op, op.in, size_);
  post_all_gather(op, bytes_of(op.in), op.out, tag(op, kData));
}

void P2pEngine::end_phase(const CollectiveOp& op, int k) {
  if (chained(op)) return;  // host 1 folded piece by piece (fold_arrived)
  if (two_level(op)) return end_host_phase(op, k);
  if (one_round(op))
    return reduce_received(op, bytes_of(op.out), bytes_of(op.out), op.out.numel(), 1);
  if (op.type == OpType::all_reduce) {
    char* data = bytes_of(op.out);
    const int64_t n = op.out.numel();
    if (k == 0) return reduce_received(op, data, own_chunk(op), n, size_);
    return keep_own_chunk(op, own_chunk(op), data, n);
  }
  if (op.type == OpType::reduce_scatter)
    return reduce_received(op, bytes_of(op.in), bytes_of(op.out), op.in.numel(), size_);
  if (!host_part(op)) keep_own_chunk(op, bytes_of(op.in), bytes_of(op.out), op.out.numel());
}

void P2pEngine::run_phases(const CollectiveOp& op, int from) {
  for (int k = from; k < phases(op); ++k) {
    begin_phase(op, k);
    wait_all(op);
    end_phase(op, k);
  }
}

bool P2pEngine::small(const CollectiveOp& op) {
  if (op.type != OpType::all_reduce && op.type != OpType::reduce_scatter &&
      op.type != OpType::all_gather)
    return false;
  return larger_side(op) <= kInlineMaxBytes;
}

bool P2pEngine::start(const CollectiveOp& op, Clock::time_point deadline,
                      Clock::duration patience) {
  started_ = Clock::now();
  deadline_ = deadline;
  segment_ = Chunk{0, op.out.numel()};  // an inline chain is one segment
  for (int k = 0; k < phases(op); ++k) {
    begin_phase(op, k);
    if (!wait_until(op, patience)) return false;
    end_phase(op, k);
  }
  return true;
}

void P2pEngine::finish(const CollectiveOp& op) {
  wait_all(op);
  end_phase(op, phase_);
  run_phases(op, phase_ + 1);
}

void P2pEngine::run(const CollectiveOp& op, Clock::time_point deadline) {
  started_ = Clock::now();
  deadline_ = deadline;
  if (debug_ || op.type == OpType::barrier) check_fingerprints(op);  // a barrier is just this
  const size_t es = op.type == OpType::barrier ? 1 : dtype_size(op.in.dtype());
  switch (op.type) {
    case OpType::barrier:
      return;
    case OpType::all_reduce:
      if (chained(op)) return run_chain(op);
      return run_phases(op, 0);
    case OpType::reduce_scatter:
    case OpType::all_gather:
    case OpType::split:  // an all-gather (never small: one flat phase)
      return run_phases(op, 0);
    case OpType::broadcast: {
      const int64_t bytes = op.out.numel() * static_cast<int64_t>(es);
      if (bytes == 0) return;
      if (rank_ == op.root) {
        for (int j = 0; j < size_; ++j)
          if (j != rank_) post_send(bytes_of(op.out), bytes, j, tag(op, kData));
      } else {
        post_recv(bytes_of(op.out), bytes, op.root, tag(op, kData));
      }
      return wait_all(op);
    }
    case OpType::all_to_all: {
      const char* in = bytes_of(op.in);
      char* out = bytes_of(op.out);
      const int64_t n = op.in.numel();
      const Chunk mine = chunk_of(n, size_, rank_);
      for (int j = 0; j < size_; ++j) {
        Chunk cj = chunk_of(n, size_, j);
        if (j == rank_) {
          if (mine.size)
            std::memcpy(out + j * mine.size * es, in + mine.offset * es, mine.size * es);
          continue;
        }
        if (mine.size) post_recv(out + j * mine.size * es, mine.size * es, j, tag(op, kData));
        if (cj.size) post_send(in + cj.offset * es, cj.size * es, j, tag(op, kData));
      }
      return wait_all(op);
    }
    default:
      break;
  }
  throw CommError(detail::concat("mpi/p2p does not support ", op_type_name(op.type)));
}

}  // namespace braid::comm
