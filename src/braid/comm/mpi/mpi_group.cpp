#include "braid/comm/mpi/mpi_group.h"

#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "braid/core/error.h"

namespace braid::comm {

namespace {

int comm_rank(MPI_Comm c) {
  int r = 0;
  MPI_Comm_rank(c, &r);
  return r;
}
int comm_size(MPI_Comm c) {
  int s = 0;
  MPI_Comm_size(c, &s);
  return s;
}

std::string transport_choice() {
  const char* t = std::getenv("BRAID_COMM_TRANSPORT");
  std::string s = t ? t : "auto";
  if (s != "auto" && s != "shm" && s != "p2p")
    throw CommError("BRAID_COMM_TRANSPORT='" + s + "': expected auto, shm or p2p");
  return s;
}

// BRAID_COMM_HIERARCHY=0 keeps a group that spans hosts on the flat algorithms (no hierarchical
// all_reduce, no two-level small collectives).
bool hierarchy_enabled() {
  const char* h = std::getenv("BRAID_COMM_HIERARCHY");
  std::string s = h ? h : "1";
  if (s != "0" && s != "1") throw CommError("BRAID_COMM_HIERARCHY='" + s + "': expected 0 or 1");
  return s == "1";
}

constexpr int64_t kMaxMessage = int64_t{1} << 30;
constexpr uintptr_t kAlign = 4096;

// Note [One-copy collectives] (shm/shm_one_copy.cpp) for the processes of one node: every rank
// lets its peers read its memory as MPI's vader does (PR_SET_PTRACER_ANY, for Yama's ptrace
// scope 1) and reads a word from each of them with process_vm_readv (process_vm_writev, which
// the broadcast also takes, is allowed by the same check); cma when every rank of comm read
// every word, else slots (seccomp, a container's capabilities, Yama scope 2-3).
PeerMemory probe_peer_memory(MPI_Comm comm, int rank, int size) {
  if (size == 1) return PeerMemory::slots;
#ifdef PR_SET_PTRACER
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);  // fails harmlessly without Yama
#endif
  static volatile uint64_t word = 0;
  word = 0x6272616964000000ULL + static_cast<uint64_t>(rank);
  uint64_t mine[2] = {static_cast<uint64_t>(getpid()), reinterpret_cast<uintptr_t>(&word)};
  std::vector<uint64_t> all(2 * static_cast<size_t>(size));
  mpi_check(MPI_Allgather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, comm),
            "MPI_Allgather");
  int ok = 1;
  for (int r = 0; r < size && ok; ++r) {
    if (r == rank) continue;
    uint64_t got = 0;
    iovec local{&got, sizeof got};
    iovec remote{reinterpret_cast<void*>(all[2 * r + 1]), sizeof got};
    ok = process_vm_readv(static_cast<pid_t>(all[2 * r]), &local, 1, &remote, 1, 0) ==
             static_cast<ssize_t>(sizeof got) &&
         got == 0x6272616964000000ULL + static_cast<uint64_t>(r);
  }
  // No rank returns (and so no peer's word may change) before every read is done.
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
  return ok ? PeerMemory::cma : PeerMemory::slots;
}

}  // namespace

MpiGroup::MpiGroup(std::shared_ptr<MpiRuntime> runtime, MPI_Comm comm, ProcessGroupOptions options)
    : ProcessGroup(comm_rank(comm), comm_size(comm), std::move(options)),
      runtime_(std::move(runtime)),
      comm_(comm) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  mpi_check(MPI_Comm_dup(comm_, &p2p_comm_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(p2p_comm_, MPI_ERRORS_RETURN);
  runtime_->defer_free([c = comm_, p = p2p_comm_]() mutable {
    MPI_Comm_free(&p);
    MPI_Comm_free(&c);
  });

  MPI_Comm node = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank(), MPI_INFO_NULL, &node),
            "MPI_Comm_split_type");
  int all_on_node = comm_size(node) == size() ? 1 : 0;
  // Every rank must take the same decision.
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, &all_on_node, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce");
  std::string transport = transport_choice();
  if (transport == "shm" && !all_on_node)
    throw CommError(prefix() + "BRAID_COMM_TRANSPORT=shm but the group spans several nodes");
  if (all_on_node && transport != "p2p") {
    size_t slot = options_slot_bytes();
    MPI_Aint bytes =
        rank() == 0 ? static_cast<MPI_Aint>(ShmEngine::arena_bytes(size(), slot) + kAlign) : 0;
    void* mine = nullptr;
    mpi_check(MPI_Win_allocate_shared(bytes, 1, MPI_INFO_NULL, node, &mine, &win_),
              "MPI_Win_allocate_shared");
    MPI_Aint got = 0;
    int disp = 0;
    void* base = nullptr;
    mpi_check(MPI_Win_shared_query(win_, 0, &got, &disp, &base), "MPI_Win_shared_query");
    // The window need not be cache-line aligned; the segment's offset within a page is the same
    // in every process, so rounding up lands every rank on the same byte.
    base =
        reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(base) + kAlign - 1) / kAlign * kAlign);
    if (rank() == 0) ShmEngine::init_arena(base, size());
    mpi_check(MPI_Barrier(node), "MPI_Barrier");
    if (this->options().one_copy) peers_ = probe_peer_memory(comm_, rank(), size());
    // Note [Spinning in a host step] (shm/shm_barrier.cpp): a synchronous group is a host step.
    shm_ = std::make_unique<ShmEngine>(
        base, rank(), size(), slot, /*check_pids=*/true, [this] { return poll_p2p(); },
        this->options().synchronous ? ShmEngine::kHostStepSpin : ShmEngine::kSpin, peers_);
    runtime_->defer_free([w = win_]() mutable { MPI_Win_free(&w); });
    // Rank 0's segment is the whole node's window: each rank is charged a 1/size share
    // (Note [Group memory]). The charge ends with the group; the window itself is freed at
    // MPI finalisation (MPI_Win_free is collective, so it is deferred), untracked until then.
    const auto window = static_cast<int64_t>(ShmEngine::arena_bytes(size(), slot) + kAlign);
    charge_memory(window / size() + (rank() < window % size() ? 1 : 0));
  } else {
    if (!all_on_node) layout_ = host_layout(node);
    const bool hierarchy = hierarchy_enabled();
    std::shared_ptr<ProcessGroup> host_group, host_now;
    MPI_Comm leader_comm = MPI_COMM_NULL;
    if (layout_.hierarchical() && hierarchy) {
      MPI_Comm host_comm = MPI_COMM_NULL, now_comm = MPI_COMM_NULL;
      mpi_check(MPI_Comm_dup(node, &host_comm), "MPI_Comm_dup");
      mpi_check(MPI_Comm_dup(node, &now_comm), "MPI_Comm_dup");
      mpi_check(MPI_Comm_dup(comm_, &leader_comm), "MPI_Comm_dup");
      MPI_Comm_set_errhandler(leader_comm, MPI_ERRORS_RETURN);
      runtime_->defer_free([c = leader_comm]() mutable { MPI_Comm_free(&c); });
      ProcessGroupOptions host_options = this->options();
      host_options.name += "/host";
      ProcessGroupOptions now_options = host_options;
      now_options.synchronous = true;  // Note [Host group on the caller], hier_engine.h
      host_group = std::make_shared<MpiGroup>(runtime_, host_comm, std::move(host_options));
      host_now = std::make_shared<MpiGroup>(runtime_, now_comm, std::move(now_options));
    }
    // Note [Two-level small collectives] (p2p_host_phases.cpp): their steps inside a host run
    // on host_now too.
    p2p_ = std::make_unique<P2pEngine>(
        comm_, rank(), size(), this->options().debug, [this] { poll_p2p(); },
        [this](int64_t bytes) { charge_memory(bytes); },  // released by ~ProcessGroup
        layout_, hierarchy, host_now);
    if (host_now)
      hier_ = std::make_unique<HierEngine>(leader_comm, rank(), layout_, std::move(host_group),
                                           std::move(host_now), [this] { poll_p2p(); });
  }
  runtime_->defer_free([node]() mutable { MPI_Comm_free(&node); });
  start();
}

HostLayout MpiGroup::host_layout(MPI_Comm node) const {
  // A host is a shared-memory node; its key is the group rank of the node's first member.
  int first = rank();
  mpi_check(MPI_Bcast(&first, 1, MPI_INT, 0, node), "MPI_Bcast");
  std::vector<int> firsts(static_cast<size_t>(size()));
  mpi_check(MPI_Allgather(&first, 1, MPI_INT, firsts.data(), 1, MPI_INT, comm_), "MPI_Allgather");
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  std::vector<char> names(static_cast<size_t>(size()) * MPI_MAX_PROCESSOR_NAME);
  mpi_check(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(),
                          MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm_),
            "MPI_Allgather");
  HostLayout layout;
  std::vector<int> index_of_first(static_cast<size_t>(size()), -1);
  for (size_t r = 0; r < firsts.size(); ++r) {
    int& index = index_of_first[static_cast<size_t>(firsts[r])];
    if (index < 0) {
      index = layout.hosts();
      const char* n = names.data() + static_cast<size_t>(firsts[r]) * MPI_MAX_PROCESSOR_NAME;
      layout.names.emplace_back(n, strnlen(n, MPI_MAX_PROCESSOR_NAME));
    }
    layout.host_of.push_back(index);
  }
  return layout;
}

size_t MpiGroup::options_slot_bytes() const {
  if (options().shm_slot_bytes) return options().shm_slot_bytes;
  if (const char* s = std::getenv("BRAID_COMM_SHM_SLOT_BYTES"); s && *s) {
    long long v = std::atoll(s);
    if (v >= 4096) return static_cast<size_t>(v) / 64 * 64;
  }
  return kDefaultSlotBytes;
}

MpiGroup::~MpiGroup() {
  stop();
  if (shm_) shm_->mark_left();
}

void MpiGroup::run_collective(const CollectiveOp& op, Clock::time_point deadline) {
  if (shm_) return shm_->run(op, deadline);
  // Note [Inline collectives across hosts] (p2p_engine.h): a small all_reduce runs flat on
  // every path, so that each rank picks the same algorithm whichever thread runs it; an f32 one
  // over 2 hosts, the chain at every size (Note [Chain across 2 hosts]).
  if (hier_ && HierEngine::handles(op) && !P2pEngine::small(op) && !p2p_->chained(op))
    return hier_->run(op, deadline);
  p2p_->run(op, deadline);
}

// Note [Inline collectives]: on shared memory, and small ops across hosts.
bool MpiGroup::can_run_inline(const CollectiveOp& op) const {
  return shm_ ? shm_->can_start(op) : p2p_->can_start(op);
}

bool MpiGroup::start_inline(const CollectiveOp& op, Clock::time_point deadline) {
  if (shm_) return shm_->start(op, deadline, ShmEngine::kInlinePatience);
  return p2p_->start(op, deadline, P2pEngine::kInlinePatience);
}

void MpiGroup::finish_inline(const CollectiveOp& op) {
  if (shm_) return shm_->finish(op);
  p2p_->finish(op);
}

void MpiGroup::on_fatal(const std::string& message) {
  if (shm_) shm_->mark_left();
  runtime_->fatal(message);
}

void MpiGroup::start_p2p(const CollectiveOp& op, std::shared_ptr<Work> work,
                         Clock::time_point deadline) {
  PendingP2p p{op, std::move(work), deadline, {}};
  char* data = bytes_of(op.in);
  int64_t bytes = static_cast<int64_t>(op.in.nbytes());
  do {
    int piece = static_cast<int>(std::min(bytes, kMaxMessage));
    p.reqs.emplace_back();
    int rc = op.type == OpType::send
                 ? MPI_Isend(data, piece, MPI_BYTE, op.root, op.tag, p2p_comm_, &p.reqs.back())
                 : MPI_Irecv(data, piece, MPI_BYTE, op.root, op.tag, p2p_comm_, &p.reqs.back());
    mpi_check(rc, op.type == OpType::send ? "MPI_Isend" : "MPI_Irecv");
    data += piece;
    bytes -= piece;
  } while (bytes > 0);
  pending_.push_back(std::move(p));
}

bool MpiGroup::poll_p2p() {
  const auto now = Clock::now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    int done = 0;
    int rc =
        MPI_Testall(static_cast<int>(it->reqs.size()), it->reqs.data(), &done, MPI_STATUSES_IGNORE);
    std::string error;
    if (rc != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, text, &len);
      error = it->op.describe() + ": MPI error: " + std::string(text, len);
    } else if (done) {
      it->work->mark_done();
      it = pending_.erase(it);
      continue;
    } else if (now > it->deadline) {
      error = detail::concat(it->op.describe(), " timed out after ", timeout().count(),
                             " ms: ", layout_.rank_name(it->op.root),
                             it->op.type == OpType::send ? " never received" : " never sent");
    } else {
      ++it;
      continue;
    }
    std::string msg = prefix() + error;
    abandoned_.push_back(it->op);
    it->work->mark_failed(std::string((msg)));
    it = pending_.erase(it);
    mark_broken(error);
  }
  return !pending_.empty();
}

void MpiGroup::fail_p2p(const std::string& why) {
  for (auto& p : pending_) {
    abandoned_.push_back(p.op);
    p.work->mark_failed(std::string((prefix() + p.op.describe() + " failed: " + why)));
  }
  pending_.clear();
}

std::shared_ptr<ProcessGroup> MpiGroup::make_subgroup(int color, const std::vector<int>& members,
                                                      uint64_t, ProcessGroupOptions options) {
  int key = 0;
  if (color >= 0)
    key = static_cast<int>(std::find(members.begin(), members.end(), rank()) - members.begin());
  MPI_Comm child = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split(comm_, color >= 0 ? color : MPI_UNDEFINED, key, &child),
            "MPI_Comm_split");
  if (color < 0) return nullptr;
  return std::make_shared<MpiGroup>(runtime_, child, std::move(options));
}

}  // namespace braid::comm
