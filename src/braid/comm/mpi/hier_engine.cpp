#include "braid/comm/mpi/hier_engine.h"

#include <algorithm>
#include <sstream>
#include <thread>

#include "braid/comm/mpi/mpi_runtime.h"
#include "braid/comm/mpi/poll_backoff.h"
#include "braid/comm/process_group.h"
#include "braid/comm/reduce_kernels.h"
#include "braid/comm/work.h"
#include "braid/core/error.h"

namespace braid::comm {

// Note [Hierarchical all_reduce]
// A group of ranks on several hosts, each host holding a run of consecutive ranks, reduces in
// rank order (Note [Deterministic reduction]) along a chain of hosts:
//   host 0:  its ranks all_reduce over shared memory; its leader (first rank) sends the result,
//            the partial fold x_0 (+) ... (+) x_{k-1}, to host 1's leader;
//   host h:  the leader folds its own data onto the partial it received (acc = P; acc (+)= x_L,
//            the same kernel as every other combine), then the host all_reduces over shared
//            memory with that as its first rank's contribution, continuing the fold in rank
//            order; the leader sends the new partial on;
//   last:    holds the result (divided by the world size for avg) and its leader sends it to
//            every other leader, which broadcasts it over its host's shared memory.
// Every element sees exactly the flat fold, so the result is bit for bit the one-host result.
// Data move in 1 MiB chunks, so the chain is a pipeline: host h works on chunk c + 1 while
// host h + 1 folds chunk c. Between hosts each leader sends the buffer once forward and
// receives it once back (the last host sends it hosts - 1 times), where the flat
// reduce-scatter + all-gather moves 2 (n - k) / n of it from each of a host's k ranks.
// Only f32 goes this way: bf16/f16 (and integers) accumulate wider than their data, and a
// partial rounded to the data type between hosts would change the bits.

namespace {

constexpr int64_t kChunk = int64_t{1} << 18;  // floats: 1 MiB

}  // namespace

int HierEngine::tag_of(const CollectiveOp& op, Phase phase) {
  return static_cast<int>(op.seq % 8000) * 2 + phase;  // < 32767, the smallest MPI_TAG_UB
}

bool HostLayout::hierarchical() const {
  if (hosts() < 2) return false;
  std::vector<int> count(names.size(), 0);
  for (size_t r = 0; r < host_of.size(); ++r) {
    if (r > 0 && host_of[r] != host_of[r - 1] && host_of[r] != host_of[r - 1] + 1) return false;
    ++count[static_cast<size_t>(host_of[r])];
  }
  return *std::max_element(count.begin(), count.end()) >= 2;
}

std::string HostLayout::rank_name(int r) const {
  if (r < 0 || static_cast<size_t>(r) >= host_of.size()) return "rank " + std::to_string(r);
  return "rank " + std::to_string(r) + " (host " + names[static_cast<size_t>(host_of[r])] + ")";
}

std::string HostLayout::describe() const {
  if (names.empty()) return "";
  std::string s = std::to_string(hosts()) + " hosts:";
  for (size_t r = 0; r < host_of.size();) {
    size_t e = r;
    while (e + 1 < host_of.size() && host_of[e + 1] == host_of[r]) ++e;
    s += (r ? ", " : " ") + names[static_cast<size_t>(host_of[r])] +
         (e > r ? " ranks " + std::to_string(r) + "-" + std::to_string(e)
                : " rank " + std::to_string(r));
    r = e + 1;
  }
  return s;
}

HierEngine::HierEngine(MPI_Comm comm, int rank, HostLayout layout,
                       std::shared_ptr<ProcessGroup> host_group,
                       std::shared_ptr<ProcessGroup> host_now, std::function<void()> progress)
    : comm_(comm),
      rank_(rank),
      layout_(std::move(layout)),
      host_(std::move(host_group)),
      host_now_(std::move(host_now)),
      progress_(std::move(progress)) {
  host_index_ = layout_.host_of[static_cast<size_t>(rank_)];
  for (size_t r = 0; r < layout_.host_of.size(); ++r)
    if (r == 0 || layout_.host_of[r] != layout_.host_of[r - 1])
      leaders_.push_back(static_cast<int>(r));
  const int k = static_cast<int>(layout_.host_of.size() / leaders_.size());
  if (k >= 2 && layout_.host_of.size() % leaders_.size() == 0) {
    ranks_per_host_ = k;
    for (size_t g = 0; g < leaders_.size(); ++g)
      if (leaders_[g] != static_cast<int>(g) * k) ranks_per_host_ = 0;
  }
}

HierEngine::~HierEngine() = default;

bool HierEngine::handles(const CollectiveOp& op) {
  return op.type == OpType::all_reduce && op.out.dtype() == DType::f32;
}

void HierEngine::wait(std::vector<MPI_Request>& reqs, const std::vector<int>& peers,
                      const CollectiveOp& op, Clock::time_point deadline, const char* what) {
  const auto started = Clock::now();
  for (uint64_t it = 0;; ++it) {
    int done = 0;
    mpi_check(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE),
              "MPI_Testall");
    if (done) break;
    if (progress_ && it % 8 == 0) progress_();
    if (Clock::now() > deadline) {
      std::ostringstream os;
      os.precision(3);
      os << op.describe() << " timed out after "
         << std::chrono::duration<double>(Clock::now() - started).count() << " s: ";
      for (size_t i = 0; i < peers.size(); ++i)
        if (reqs[i] != MPI_REQUEST_NULL) os << layout_.rank_name(peers[i]) << " ";
      os << what;
      // The requests stay posted: MPI may still touch their buffers, and the job is ending.
      reqs.clear();
      throw CommError(os.str());
    }
    poll_backoff(it);  // Note [Poll backoff]
  }
  reqs.clear();
}

void HierEngine::wait_host(const std::shared_ptr<Work>& work, std::vector<MPI_Request>& sends) {
  // Keep the chunks already sent moving while the host reduces the next one.
  for (uint64_t it = 0; !work->is_completed(); ++it) {
    int done = 0;
    if (!sends.empty())
      mpi_check(
          MPI_Testall(static_cast<int>(sends.size()), sends.data(), &done, MPI_STATUSES_IGNORE),
          "MPI_Testall");
    if (it > 64) std::this_thread::sleep_for(std::chrono::microseconds(5));
  }
  work->wait();  // rethrows the host group's failure
}

void HierEngine::run(const CollectiveOp& op, Clock::time_point deadline) {
  const int64_t n = op.out.numel();
  if (n == 0) return;
  if (ranks_per_host_ > 0 && n <= kScatteredMaxFloats) return run_scattered(op, deadline);
  float* x = reinterpret_cast<float*>(bytes_of(op.out));
  const int hosts = layout_.hosts();
  const int h = host_index_;
  const bool leader = rank_ == leaders_[static_cast<size_t>(h)];
  const bool last = h == hosts - 1;
  const ReduceOp combine = combine_of(op.reduce);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  auto len_of = [&](int64_t c) { return std::min(kChunk, n - c * kChunk); };

  // Phase 1: the fold runs down the chain of hosts, chunk by chunk.
  std::vector<MPI_Request> sends;
  std::vector<int> send_peers;
  MPI_Request recv = MPI_REQUEST_NULL;
  const int prev = h > 0 ? leaders_[static_cast<size_t>(h - 1)] : -1;
  auto post_recv = [&](int64_t c) {
    float* slot = inbox_.data() + (c % 2) * kChunk;
    mpi_check(MPI_Irecv(slot, static_cast<int>(len_of(c)), MPI_FLOAT, prev, tag_of(op, kForward),
                        comm_, &recv),
              "MPI_Irecv");
  };
  if (leader && h > 0) {
    inbox_.resize(static_cast<size_t>(2 * kChunk));
    post_recv(0);
  }
  for (int64_t c = 0; c < chunks; ++c) {
    float* chunk = x + c * kChunk;
    const int64_t len = len_of(c);
    if (leader && h > 0) {
      std::vector<MPI_Request> one = {recv};
      wait(one, {prev}, op, deadline, "never sent its partial result");
      const float* partial = inbox_.data() + (c % 2) * kChunk;
      if (c + 1 < chunks) post_recv(c + 1);
      const void* srcs[2] = {partial, chunk};
      reduce_ranks(srcs, 2, chunk, nullptr, len, DType::f32, combine);
    }
    wait_host(host_->all_reduce(op.out.flat_range(c * kChunk, len), combine), sends);
    if (last && op.reduce == ReduceOp::avg)
      divide_by_ranks(chunk, len, static_cast<int>(layout_.host_of.size()));
    if (!leader) continue;
    auto send_to = [&](int peer, Phase phase) {
      sends.emplace_back();
      send_peers.push_back(peer);
      mpi_check(MPI_Isend(chunk, static_cast<int>(len), MPI_FLOAT, peer, tag_of(op, phase), comm_,
                          &sends.back()),
                "MPI_Isend");
    };
    if (!last) {
      send_to(leaders_[static_cast<size_t>(h + 1)], kForward);
    } else {
      for (int g = 0; g < hosts - 1; ++g) send_to(leaders_[static_cast<size_t>(g)], kResult);
    }
  }
  // The partials must be gone before the results land in the same memory.
  wait(sends, send_peers, op, deadline, "never received");
  if (last) return;

  // Phase 2: the result comes back from the last host and spreads over each host.
  std::vector<MPI_Request> recvs(leader ? static_cast<size_t>(chunks) : 0);
  const int from = leaders_.back();
  for (size_t c = 0; c < recvs.size(); ++c)
    mpi_check(MPI_Irecv(x + static_cast<int64_t>(c) * kChunk,
                        static_cast<int>(len_of(static_cast<int64_t>(c))), MPI_FLOAT, from,
                        tag_of(op, kResult), comm_, &recvs[c]),
              "MPI_Irecv");
  std::vector<MPI_Request> none;
  for (int64_t c = 0; c < chunks; ++c) {
    if (leader) {
      std::vector<MPI_Request> one = {recvs[static_cast<size_t>(c)]};
      recvs[static_cast<size_t>(c)] = MPI_REQUEST_NULL;
      wait(one, {from}, op, deadline, "never sent the result");
    }
    wait_host(host_->broadcast(op.out.flat_range(c * kChunk, len_of(c)), 0), none);
  }
}

}  // namespace braid::comm
