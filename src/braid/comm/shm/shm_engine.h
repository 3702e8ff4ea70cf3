// ShmEngine: collectives among ranks that share one memory arena: threads of one process
// (local backend, heap arena) or processes of one node (MPI backend, MPI-3 shared window).
//
// Arena layout: a RankControl per rank, then two staging slots per rank, then two result slots
// (each slot_bytes). Ranks synchronise with per-rank phase counters (release/acquire); every
// wait is bounded by the operation's deadline, checks that peers are alive, and knows which
// ranks have not arrived.
//
// Note [Shm phases]: barrier k publishes data written into buffer half k % 2, and a reader
// consumes it before arriving at barrier k + 1. A writer reuses half k % 2 only for barrier
// k + 2, which it passes only after every reader arrived at k + 1. So one barrier per step, no
// trailing barrier at the end of an operation, and operations can follow back to back.
// Large tensors are processed in slot-sized steps, which keeps staging in cache. Every
// collective but the two-phase all_reduce (more than kDirectMaxRanks ranks) is a loop of steps,
// each stage() (write this rank's slot), barrier, collect() (read the peers' slots).
//
// The ranks' barriers live in shm_barrier.cpp (waits, sleeping, liveness, timeouts, fingerprint
// checks); the collectives in shm_engine.cpp.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "braid/comm/op.h"

namespace braid::comm {

struct alignas(128) RankControl {
  std::atomic<uint64_t> phase{0};     // last barrier this rank arrived at
  std::atomic<uint64_t> seq{0};       // last collective it entered
  std::atomic<uint32_t> op{0};        // ... and its OpType (diagnostics only)
  std::atomic<uint32_t> left{0};      // 1 once the rank destroyed its group or failed
  std::atomic<int32_t> pid{0};        // for liveness checks across processes (0: not checked)
  std::atomic<uint32_t> wake{0};      // futex word: bumped when this rank arrives and ...
  std::atomic<uint32_t> sleepers{0};  // ... peers sleep on it (Note [Sleeping in barriers])
  Fingerprint fp[2];                  // fingerprint of seq, in fp[seq % 2] (Note [Fingerprints])
  std::atomic<uint64_t> source{0};    // a one-copy broadcast's buffer, at this rank's address
};

// Note [One-copy collectives] (shm_one_copy.cpp): whether a rank can copy from and into its
// peers' own buffers, and how: not at all (every byte goes through the slots), directly (threads
// of one process), or with process_vm_readv / process_vm_writev (processes the kernel lets do so:
// cross-memory attach).
enum class PeerMemory { slots, shared, cma };

class ShmEngine {
 public:
  using Clock = std::chrono::steady_clock;

  static size_t arena_bytes(int size, size_t slot_bytes);
  // Constructs the control blocks; exactly one rank calls it before any rank uses the arena.
  static void init_arena(void* base, int size);

  // progress (may be empty) runs every few hundred microseconds while waiting, so sends/recvs
  // of the same group make progress during a collective; it returns whether any are still in
  // flight. check_pids: peers are processes. spin: how long a wait spins before it yields
  // (Note [Spinning in a host step], shm_barrier.cpp).
  static constexpr std::chrono::microseconds kSpin{50};
  static constexpr std::chrono::microseconds kHostStepSpin{3};
  // peers: how a one-copy op reads the peers' buffers (Note [One-copy collectives]).
  ShmEngine(void* base, int rank, int size, size_t slot_bytes, bool check_pids,
            std::function<bool()> progress, Clock::duration spin = kSpin,
            PeerMemory peers = PeerMemory::slots);

  // Runs one collective; throws CommError (timeout, dead peer, mismatch) without a group prefix.
  void run(const CollectiveOp& op, Clock::time_point deadline);

  // Note [Inline collectives] (process_group.h) on shared memory: an op that is one step of at
  // most kInlineMaxBytes can start on the issuing thread. start() runs it up to its barrier and
  // waits there at most `patience`: true when the op is done, false when a peer has not arrived;
  // finish() (the comm thread's next call into the engine) then completes it.
  static constexpr int64_t kInlineMaxBytes = 256 << 10;
  static constexpr std::chrono::microseconds kInlinePatience{20};
  bool can_start(const CollectiveOp& op) const;
  bool start(const CollectiveOp& op, Clock::time_point deadline, Clock::duration patience);
  void finish(const CollectiveOp& op);

  void mark_left();  // peers waiting on this rank fail at once
  bool has_left(int rank) const;

 private:
  void begin(const CollectiveOp& op, Clock::time_point deadline);
  // Note [One-copy collectives]: a broadcast of at least kOneCopyMinBytes goes straight from the
  // root's buffer into the peers'.
  static constexpr int64_t kOneCopyMinBytes = 128 << 10;
  bool one_copy(const CollectiveOp& op) const;
  void broadcast_one_copy(const CollectiveOp& op);
  // bytes between `local` and `remote`, an address in peer's memory: pulled from it, or pushed.
  void copy_peer(const CollectiveOp& op, int peer, char* local, uint64_t remote, int64_t bytes,
                 bool push) const;
  void all_reduce_two_phase(const CollectiveOp& op);
  int64_t step_elems(const CollectiveOp& op) const;  // elements per step (per rank's chunk)
  int64_t num_steps(const CollectiveOp& op) const;
  void stage(const CollectiveOp& op, int64_t s, int h);    // before step s's barrier
  void collect(const CollectiveOp& op, int64_t s, int h);  // after it
  void publish_chunks(const char* in, int64_t n, int64_t lo, int64_t step, size_t es, int h);

  // Arrives at the next barrier, waits for every rank, returns the buffer half it published.
  int barrier(const CollectiveOp& op);
  uint64_t arrive_next();                          // arrives at the next barrier: its number
  void await(const CollectiveOp& op, uint64_t k);  // bounded by the deadline; throws
  bool await_briefly(const CollectiveOp& op, uint64_t k, Clock::duration patience);
  int first_absent(uint64_t k, int from) const;  // first rank >= from not at barrier k, or size
  void all_arrived(const CollectiveOp& op);      // after a barrier: fingerprints at the first
  void arrive(uint64_t k);
  void sleep_until_arrival(int peer, uint64_t k, Clock::duration at_most);
  static void wake_all(std::atomic<uint32_t>& word);
  void note_clock(Clock::time_point now);  // a wait read the clock (Note [Stopped waiter])
  [[noreturn]] void throw_timeout(const CollectiveOp& op, uint64_t target) const;
  std::string dead_peer(const CollectiveOp& op, uint64_t target) const;  // "" when all alive
  void check_fingerprints(const CollectiveOp& op) const;

  RankControl& ctl(int r) const { return controls_[r]; }
  char* slot(int r, int half) const { return data_ + (2 * r + half) * slot_bytes_; }
  char* result(int half) const { return data_ + (2 * size_ + half) * slot_bytes_; }

  RankControl* controls_;
  char* data_;
  int rank_;
  int size_;
  size_t slot_bytes_;
  bool check_pids_;
  std::function<bool()> progress_;
  Clock::duration spin_;
  PeerMemory peers_;
  std::vector<const void*> srcs_;  // reduction sources in rank order
  uint64_t phase_ = 0;
  bool first_barrier_ = false;  // the next barrier is the first of the current collective
  uint64_t started_phase_ = 0;  // the barrier start() arrived at
  Clock::time_point deadline_;
  Clock::time_point started_;  // the op's first wait (timeout messages count from it)
  // Note [Stopped waiter]: the op's latest clock reading in a wait, the longest gap between two
  // readings, and whether its first reading already found the deadline passed.
  Clock::time_point last_clock_;
  Clock::duration away_{};
  bool late_start_ = false;
};

}  // namespace braid::comm
