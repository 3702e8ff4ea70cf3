// ProcessGroup: the ranks that communicate, and the collectives they run together.
//
// Ordering contract (the one place it is written):
//  1. Every rank of a group issues the same collectives (all_reduce, reduce_scatter, all_gather,
//     broadcast, all_to_all, barrier, split) in the same order, with matching dtype, count, op
//     and root (see Note [Fingerprints] in op.h). The k-th collective issued on a group has
//     sequence number k on every rank.
//  2. Each call returns at once with a Work; the group runs its operations one at a time, in
//     issue order, on its own communication thread (Note [Comm threads], docs/design.md), so
//     compute overlaps communication. Collectives complete in issue order. Different groups are
//     independent: ranks may interleave the collectives of different groups differently. A small
//     collective issued while that thread is idle may start on the issuing thread, as the thread's
//     next task, and finish there if the peers are there too; "at once" then includes its copies
//     and at most ~20 us of waiting for peers (Note [Inline collectives]).
//  3. Until its Work completes, an operation's tensors belong to the group: do not read or write
//     them (the handles keep the memory alive). A collective drops its handles before its Work
//     completes, so after wait() the caller's handles are the only ones left.
//  4. send/recv are point to point and take no collective sequence number. They start in issue
//     order and may complete after later operations; sends never wait for the matching recv to
//     start, so any order of sends and recvs between two ranks is deadlock free. Messages
//     between two ranks with the same tag arrive in the order sent.
//  5. Nothing waits forever. An operation that outlives the group's timeout fails on every rank
//     with a CommError naming the group, operation, sequence number and the ranks that never
//     arrived; a peer that dies fails it promptly, naming the peer; ranks that issue different
//     collectives at the same sequence number get a CommError naming both sides (always within
//     a node; across nodes with options.debug / BRAID_COMM_DEBUG=1, else the timeout catches
//     it). After such a failure the group is unusable (later operations fail at once with the
//     first error); under MPI the process aborts the whole job shortly after (Note [Fatal comm
//     errors], mpi/mpi_runtime.h).
//  6. Reductions are deterministic: element i is combined in rank order 0..n-1 (Note
//     [Deterministic reduction], reduce_kernels.h), so all_reduce equals reduce_scatter followed
//     by all_gather bit for bit, on every backend.
//
// Sizes (Note [Uneven chunks], chunking.h): with n elements over w ranks, rank r's chunk is
// chunk_of(n, w, r). reduce_scatter(out, in): in has n, out has chunk r. all_gather(out, in):
// out has n, in has chunk r. all_to_all(out, in): in has n, its chunk j goes to rank j; out has
// w blocks of size chunk_of(n, w, r).size, block j from rank j. In place: reduce_scatter's out
// may be in's chunk r, all_gather's in may be out's chunk r.
//
// Types: f32, bf16, f16 (reduced in f32), i32, i64 (reduced in int64; sums wrap; avg truncates
// toward zero) and u8. ReduceOp::avg is the sum divided by the group size.
//
// Note [Group memory]: what a group keeps between operations (its share of a shared-memory
// window, staging buffers that grow to the largest operation) is charged to category
// communication of the tracker given to set_memory_tracker(), from then on and for what it
// already holds; it is released when the group is destroyed. A window shared by the k ranks
// of a node charges each rank 1/k of it. Buffered local sends are charged to the sender's
// tracker until the receiver has copied them out. With no tracker nothing is charged. A group
// made by split() starts with its parent's tracker at the time of the split; a tracker set on
// the parent later does not reach groups split before. The world group exists before the
// rank's tracker does, hence a setter rather than a constructor argument.
//
// Note [Inline collectives]: handing a collective to the comm thread and its completion back
// (a queue, two thread wake-ups, four runnable threads on two cores) cost 6-10 us per call,
// against 1-2 us for a whole MPI_Allreduce of 4 KiB. So when nothing is queued, running or in
// flight on the group, an eligible collective (the backend says which: on shared memory, one
// step of at most 256 KiB; across hosts, Note [Inline collectives across hosts] in
// mpi/p2p_engine.h) runs on the issuing thread under the comm thread's run lock, still
// the k-th operation at its k-th place, with the same deadline, checks and errors. If the peers
// have not arrived within the backend's patience (~20 us), the rest is queued as the comm
// thread's first task and the call returns, so a late peer never holds the caller: overlap of
// compute with a collective whose peers are late is kept. A failure on the issuing thread takes
// the comm thread's path (the group is broken, on_fatal, the Work fails); the call itself never
// throws for it. With everything inline, a Work is complete when returned and wait() is a load.
//
// Note [Device staging]: every operation takes tensors on the host or on a device, whatever
// memory the backend reads and writes (its home_device()). The local and MPI backends work on
// host memory, so the group stages an operation on device tensors through host buffers; NCCL
// works on its GPU's memory, so the group stages an operation on host tensors (the pipeline's
// headers, the vocabulary-parallel loss's row statistics, the values ranks agree on) through
// device buffers. Either way, on the comm thread: the inputs away from home are copied there
// (the backend's copy, ordered after the compute queued on the device before the call), the
// backend runs on the copies, and the results are copied back before the Work completes. Views
// that overlap keep overlapping (an in-place reduce_scatter or all_gather stays in place). The
// collectives' buffers are kept per dtype and grow to the largest operation, charged as Note
// [Group memory] says; a send's or recv's copy is its own, charged to the tracker until the
// backend lets go of it, and a recv's result reaches its tensor when the comm thread next
// polls. Staged operations never run inline (a device round trip is far over Note [Inline
// collectives]' budget). A tensor on another device than a device backend's own is not staged:
// the backend refuses it, naming both. So every strategy's collectives run unchanged with any
// backend: NCCL where each rank has a GPU (Note [Device groups] in comm/device_group.h), else
// local threads or MPI through host memory.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "braid/comm/comm_thread.h"
#include "braid/comm/op.h"
#include "braid/comm/work.h"
#include "braid/core/memory_tracker.h"

namespace braid::comm {

struct ProcessGroupOptions {
  std::string name = "world";
  // A collective running longer than this fails everywhere (contract point 5).
  std::chrono::milliseconds timeout = std::chrono::seconds(600);
  // Exchange fingerprints before every collective on transports that do not do it for free.
  bool debug = false;
  // Staging bytes per rank per step for shared-memory transports; 0 = backend default.
  size_t shm_slot_bytes = 0;
  // Every collective runs whole on the issuing thread before the call returns (no comm-thread
  // hand-off): for a group only ever used inside another group's collectives (on its comm
  // thread, or on the thread that started a small one inline), which wait for each op anyway
  // (Note [Host group on the caller], mpi/hier_engine.h). Its waits spin briefly (Note
  // [Spinning in a host step], shm/shm_barrier.cpp).
  bool synchronous = false;
  // Shared-memory transports may copy a large broadcast once, straight from the root's buffer,
  // where the ranks can read each other's memory (Note [One-copy collectives],
  // shm/shm_one_copy.cpp); false: every byte through the staging slots.
  bool one_copy = true;

  // Applies BRAID_COMM_TIMEOUT (seconds, may be fractional), BRAID_COMM_DEBUG (0/1) and
  // BRAID_COMM_SINGLE_COPY (0/1: one_copy; braid's own, apart from the MPI mechanism that `braid
  // launch --single-copy` picks) on top of `base`; the environment wins because the launcher
  // sets it.
  static ProcessGroupOptions from_env(ProcessGroupOptions base);
};

class ProcessGroup {
 public:
  using Clock = std::chrono::steady_clock;

  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return options_.name; }
  const ProcessGroupOptions& options() const { return options_; }
  virtual std::string backend() const = 0;  // "local", "mpi/shm", "mpi/p2p", "mpi/p2p+hier"
  // Where the ranks live when the group spans hosts ("2 hosts: h1 ranks 0-1, h2 ranks 2-3"),
  // else "".
  virtual std::string placement() const { return ""; }
  // Each rank's host (0, 1, ... in order of their first ranks) when the group spans hosts, else
  // empty.
  virtual std::vector<int> host_of_ranks() const { return {}; }
  // The memory the backend reads and writes (Note [Device staging]): the host, or its device.
  virtual Device home_device() const { return Device::cpu(); }

  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeout_ms_); }
  void set_timeout(std::chrono::milliseconds t) { timeout_ms_ = t.count(); }

  std::shared_ptr<Work> all_reduce(Tensor t, ReduceOp op = ReduceOp::sum);
  std::shared_ptr<Work> reduce_scatter(Tensor out, Tensor in, ReduceOp op = ReduceOp::sum);
  std::shared_ptr<Work> all_gather(Tensor out, Tensor in);
  std::shared_ptr<Work> broadcast(Tensor t, int root);
  std::shared_ptr<Work> all_to_all(Tensor out, Tensor in);
  std::shared_ptr<Work> barrier();
  std::shared_ptr<Work> send(Tensor t, int dst, int tag = 0);
  std::shared_ptr<Work> recv(Tensor t, int src, int tag = 0);

  // Collective over this group (blocks until done). Ranks with the same color >= 0 form a new
  // group ordered by (key, rank); color < 0 returns nullptr. The child inherits the options
  // with the given name (default "<parent>/<color>").
  std::shared_ptr<ProcessGroup> split(int color, int key, std::string name = "");
  // Every rank calls it with the same list; members get a group ranked in list order.
  std::shared_ptr<ProcessGroup> split(const std::vector<int>& ranks, std::string name = "");

  uint64_t collectives_issued() const { return coll_seq_; }

  // Note [Group memory]. Any thread; may throw OutOfMemory (then the old tracker keeps it all).
  void set_memory_tracker(std::shared_ptr<MemoryTracker> tracker);
  std::shared_ptr<MemoryTracker> memory_tracker() const;
  int64_t memory_bytes() const;  // bytes this rank's group holds now, charged or not

 protected:
  ProcessGroup(int rank, int size, ProcessGroupOptions options);

  // The derived constructor calls start() once it can run operations; the derived destructor
  // calls stop() first (runs what is queued, fails sends/recvs still in flight).
  void start();
  void stop();

  // Backend hooks, all called on the comm thread, or on an issuing thread that holds the comm
  // thread's place (Note [Inline collectives]), never two at once. A collective returns when
  // done or throws a CommError (message without the "group 'x' rank r: " prefix, added here).
  virtual void run_collective(const CollectiveOp& op, Clock::time_point deadline) = 0;
  // Note [Inline collectives]. can_run_inline: whether op may start on the issuing thread.
  // start_inline runs it there until done (true) or until the peers are late (false: then
  // finish_inline(op), on the comm thread, completes it; nothing else runs in between).
  virtual bool can_run_inline(const CollectiveOp& /*op*/) const { return false; }
  virtual bool start_inline(const CollectiveOp& op, Clock::time_point deadline);
  virtual void finish_inline(const CollectiveOp& /*op*/) {}
  // Starts a send/recv; the backend completes or fails `work` later, from poll_p2p().
  virtual void start_p2p(const CollectiveOp& op, std::shared_ptr<Work> work,
                         Clock::time_point deadline) = 0;
  virtual bool poll_p2p() = 0;  // true while sends/recvs are in flight
  virtual void fail_p2p(const std::string& why) = 0;
  // After the (color, key) exchange: members holds the parent ranks of the new group in order
  // (empty when color < 0). Returns null for color < 0.
  // seq is the split's sequence number (the same on every member).
  virtual std::shared_ptr<ProcessGroup> make_subgroup(int color, const std::vector<int>& members,
                                                      uint64_t seq,
                                                      ProcessGroupOptions options) = 0;
  // A collective failed: the group is now broken. MPI arranges to abort the job.
  virtual void on_fatal(const std::string& /*message*/) {}

  // Backends report memory they keep between operations (Note [Group memory]); any thread.
  // charge_memory may throw OutOfMemory, before the caller allocates.
  void charge_memory(int64_t bytes);
  void release_memory(int64_t bytes);

  const std::string& prefix() const { return *prefix_; }  // "group 'world' rank 0: "
  // Comm thread: a send/recv failed in a way that leaves the group unusable (contract point 5).
  void mark_broken(const std::string& message);

 private:
  std::shared_ptr<Work> enqueue(CollectiveOp op);
  void run_task(CollectiveOp& op, const std::shared_ptr<Work>& work);
  void run_inline(CollectiveOp& op, const std::shared_ptr<Work>& work);
  void collective_done(CollectiveOp& op, const std::shared_ptr<Work>& work);
  void collective_failed(const std::exception& e, const std::shared_ptr<Work>& work);
  std::shared_ptr<Work> make_work(const CollectiveOp& op) const;

  // Note [Device staging] (device_staging.cpp), comm thread only.
  struct StagedRecv {
    Tensor away;                  // where the message goes
    Tensor home;                  // what the backend receives into
    std::shared_ptr<Work> inner;  // the backend's recv
    std::shared_ptr<Work> outer;  // the caller's
  };
  bool staged(const CollectiveOp& op) const;
  // Points op's tensors away from home at buffers at home holding their data; returns the
  // tensor the result goes back to (undefined when op.out is at home).
  Tensor stage_collective(CollectiveOp& op);
  void start_staged_p2p(CollectiveOp& op, const std::shared_ptr<Work>& work,
                        Clock::time_point deadline);
  bool poll_staged();  // completes staged recvs the backend finished; true while any remain
  void fail_staged(const std::string& why);

  int rank_;
  int size_;
  ProcessGroupOptions options_;
  std::shared_ptr<const std::string> prefix_;  // shared with the Works (Note [Lazy descriptions])
  std::atomic<int64_t> timeout_ms_;
  std::mutex issue_mu_;                // makes (sequence number, queue position) one step
  std::shared_ptr<Work> last_posted_;  // guarded by issue_mu_: the last op given to thread_
  std::atomic<uint64_t> coll_seq_{0};
  uint64_t p2p_seq_ = 0;
  std::string broken_;  // comm thread (or inline, under its run lock) only: first fatal error
  mutable std::mutex memory_mu_;
  MemoryCharge memory_{MemCategory::communication};  // guarded by memory_mu_
  std::vector<Tensor> staging_;                      // per dtype: the collectives' buffers
  std::vector<StagedRecv> staged_recvs_;             // in issue order
  std::unique_ptr<CommThread> thread_;
};

}  // namespace braid::comm
