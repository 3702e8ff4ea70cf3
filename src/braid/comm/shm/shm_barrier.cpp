// ShmEngine's barriers: arriving, waiting (spin, yield, sleep), liveness, timeouts and the
// fingerprint check. The collectives are in shm_engine.cpp.
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "braid/comm/shm/shm_engine.h"
#include "braid/core/error.h"

namespace braid::comm {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

// A process that is gone, or a zombie waiting for its parent to reap it.
bool process_alive(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return true;  // no procfs: trust kill()
  auto p = stat.rfind(") ");
  if (p == std::string::npos || p + 2 >= stat.size()) return true;
  char state = stat[p + 2];
  return state != 'Z' && state != 'X';
}

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
  os << "]";
  return os.str();
}

}  // namespace

void ShmEngine::mark_left() {
  ctl(rank_).left.store(1, std::memory_order_seq_cst);
  wake_all(ctl(rank_).wake);
}

bool ShmEngine::has_left(int rank) const {
  return ctl(rank).left.load(std::memory_order_acquire) != 0;
}

int ShmEngine::barrier(const CollectiveOp& op) {
  const uint64_t k = arrive_next();
  await(op, k);
  return static_cast<int>(k % 2);
}

uint64_t ShmEngine::arrive_next() {
  const uint64_t k = ++phase_;
  arrive(k);
  return k;
}

int ShmEngine::first_absent(uint64_t k, int from) const {
  for (; from < size_; ++from)
    if (ctl(from).phase.load(std::memory_order_acquire) < k) return from;
  return size_;
}

void ShmEngine::all_arrived(const CollectiveOp& op) {
  if (!first_barrier_) return;
  first_barrier_ = false;
  check_fingerprints(op);
}

void ShmEngine::await(const CollectiveOp& op, uint64_t k) {
  int waiting_on = first_absent(k, 0);
  if (waiting_on < size_) {
    // Spin briefly (ranks usually arrive within microseconds; spin_, Note [Spinning in a host
    // step]), yield for a while (a peer that shares our core gets to run, and a wake-up costs
    // nothing), then sleep until a peer arrives (Note [Sleeping in barriers]). Deadlines,
    // liveness and send/recv progress are checked throughout.
    const auto t0 = Clock::now();
    note_clock(t0);
    auto next_progress = t0;
    auto next_liveness = t0 + std::chrono::milliseconds(20);
    bool p2p_pending = progress_ != nullptr;
    for (uint64_t it = 0;; ++it) {
      if ((waiting_on = first_absent(k, waiting_on)) == size_) break;
      if (it % 16 != 0) {
        cpu_relax();
        continue;
      }
      const auto now = Clock::now();
      note_clock(now);
      const auto waited = now - t0;
      if (waited > spin_ && waited <= std::chrono::milliseconds(2)) {
        sched_yield();
      } else if (waited > std::chrono::milliseconds(2)) {
        // Sends/recvs in flight need polling; otherwise only liveness and the deadline do.
        auto nap = p2p_pending ? std::chrono::microseconds(200) : std::chrono::microseconds(20000);
        sleep_until_arrival(waiting_on, k, std::min<Clock::duration>(nap, deadline_ - now));
        if ((waiting_on = first_absent(k, waiting_on)) == size_) break;
      }
      if (p2p_pending && now >= next_progress) {
        p2p_pending = progress_();
        next_progress = now + std::chrono::microseconds(200);
      }
      if (now >= next_liveness) {
        next_liveness = now + std::chrono::milliseconds(20);
        if ((waiting_on = first_absent(k, waiting_on)) == size_) break;
        std::string dead = dead_peer(op, k);
        if (!dead.empty()) throw CommError(dead);
      }
      if (now > deadline_) {
        if ((waiting_on = first_absent(k, waiting_on)) == size_) break;
        throw_timeout(op, k);
      }
    }
  }
  all_arrived(op);
}

// An inline op's wait (Note [Inline collectives], process_group.h): the issuing thread spins
// for the first few microseconds (a peer in step arrives within one or two), then yields
// between checks, so a rank or comm thread that shares this core (4 ranks on 2 cores) gets to
// run, and gives up after `patience`: the comm thread then waits in await(), with its liveness
// checks, deadline and sleeping. Nothing is in flight on an inline op's group, so there is no
// send/recv to progress.
bool ShmEngine::await_briefly(const CollectiveOp& op, uint64_t k, Clock::duration patience) {
  constexpr auto kSpinOnly = std::chrono::microseconds(3);
  int waiting_on = first_absent(k, 0);
  if (waiting_on < size_) {
    const auto t0 = Clock::now();
    note_clock(t0);
    for (uint64_t it = 1;; ++it) {
      if ((waiting_on = first_absent(k, waiting_on)) == size_) break;
      if (it % 16 != 0) {
        cpu_relax();
        continue;
      }
      const auto now = Clock::now();
      note_clock(now);
      const auto waited = now - t0;
      if (waited > patience) return false;
      if (waited > kSpinOnly) sched_yield();
    }
  }
  all_arrived(op);
  return true;
}

// Note [Spinning in a host step]
// A wait spins for kSpin (50 us) before it yields: ranks on a host of their own cores arrive
// within microseconds, and a yield that lets another thread take the core can cost its time
// slice. A host group that runs the steps inside a host of an op across hosts (the synchronous
// host group: Note [Host group on the caller], mpi/hier_engine.h; Note [Two-level small
// collectives], mpi/p2p_host_phases.cpp) spins kHostStepSpin (3 us) instead, as an inline op
// does (await_briefly): its host peer may be behind on the op across hosts, on a core that
// another rank holds (on 2 network-namespace hosts x 2 ranks over 2 cores, the 50 us spin cost
// every small two-level op about 50 us: reduce_scatter of 4-64 KiB 90-117 us, 41-84 with its
// steps inside a host as MPI messages, 38-98 with the short spin). Where every rank has its own
// core a yield returns at once, so the wait is as quick.
//
// Note [Sleeping in barriers]
// A rank that waits more than a couple of milliseconds for a peer sleeps on the peer's futex
// word instead of spinning, yielding or napping in short sleeps: on a machine with as many
// compute threads as cores (DDP, 2 ranks x 1 thread on 2 cores) a communication thread that
// waits for a straggler must not take CPU from backward. (Sleeping sooner costs a wake-up
// latency per barrier, which made 4 MiB all-reduces 4x slower here.)
// The arriving rank stores its phase, then wakes sleepers if any are registered; the sleeper
// registers, reads the word, then re-checks the phase. Sequentially consistent ordering makes
// a lost wake-up impossible: either the sleeper sees the new phase, or the arriver sees the
// sleeper and bumps the word (so FUTEX_WAIT returns at once, or is woken). The futex is not
// private: the arena is shared between processes.
void ShmEngine::arrive(uint64_t k) {
  RankControl& me = ctl(rank_);
  me.phase.store(k, std::memory_order_seq_cst);
  if (me.sleepers.load(std::memory_order_seq_cst) != 0) wake_all(me.wake);
}

void ShmEngine::wake_all(std::atomic<uint32_t>& word) {
  word.fetch_add(1, std::memory_order_seq_cst);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr,
          0);
}

void ShmEngine::sleep_until_arrival(int peer, uint64_t k, Clock::duration at_most) {
  if (at_most <= Clock::duration::zero()) return;
  RankControl& c = ctl(peer);
  c.sleepers.fetch_add(1, std::memory_order_seq_cst);
  const uint32_t seen = c.wake.load(std::memory_order_seq_cst);
  if (c.phase.load(std::memory_order_seq_cst) < k && !c.left.load(std::memory_order_acquire)) {
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(at_most).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&c.wake), FUTEX_WAIT, seen, &ts, nullptr, 0);
  }
  c.sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

std::string ShmEngine::dead_peer(const CollectiveOp& op, uint64_t target) const {
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || ctl(r).phase.load(std::memory_order_acquire) >= target) continue;
    if (ctl(r).left.load(std::memory_order_acquire))
      return detail::concat(op.describe(), ": rank ", r,
                            " left the group (it failed, or destroyed the group) and never "
                            "arrived");
    int pid = ctl(r).pid.load(std::memory_order_relaxed);
    if (check_pids_ && pid > 0 && !process_alive(pid))
      return detail::concat(op.describe(), ": rank ", r, " (pid ", pid, ") died and never arrived");
  }
  return "";
}

// Note [Stopped waiter]: a waiting loop reads the clock at least every 20 ms, and an op's waits
// follow each other within microseconds (a chunk's copy between two barriers). When the op's
// clock readings are much further apart, this rank itself was not running (SIGSTOP, a debugger,
// SIGCONT from mpirun ending the job), and so was it when the op's first reading already finds
// the deadline passed (the deadline is set just before the op starts). The stop may have come
// in one wait or between two, and the timeout is seen in a later one, so the gaps are tracked
// over the whole op, not per wait. Then the deadline passed while this rank was stopped, and
// the peers it sees short of the barrier may be waiting for it (or have given up on it):
// blaming them ("ranks [0] stopped inside it") would name a healthy rank, so it says it was
// stopped instead.
void ShmEngine::note_clock(Clock::time_point now) {
  if (last_clock_ == Clock::time_point{}) {
    started_ = now;
    late_start_ = now > deadline_;
  } else {
    away_ = std::max(away_, now - last_clock_);
  }
  last_clock_ = now;
}

void ShmEngine::throw_timeout(const CollectiveOp& op, uint64_t target) const {
  std::vector<int> absent, stalled;
  std::ostringstream where;
  for (int r = 0; r < size_; ++r) {
    if (ctl(r).phase.load(std::memory_order_acquire) >= target) continue;
    uint64_t seq = ctl(r).seq.load(std::memory_order_relaxed);
    if (seq < op.seq) {
      absent.push_back(r);
      auto type = static_cast<OpType>(ctl(r).op.load(std::memory_order_relaxed));
      where << "; rank " << r << " last entered "
            << (seq == 0 ? std::string("no collective")
                         : detail::concat(op_type_name(type), " seq ", seq));
    } else {
      stalled.push_back(r);
    }
  }
  double secs = std::chrono::duration<double>(Clock::now() - started_).count();
  std::ostringstream os;
  os.precision(3);
  os << op.describe() << " timed out after " << secs << " s: ";
  if (late_start_ || away_ > std::chrono::seconds(1)) {
    os << "this rank (" << rank_ << ") itself ";
    if (late_start_)
      os << "was not running when its deadline passed";
    else
      os << "did not run for " << std::chrono::duration<double>(away_).count() << " s of it";
    os << " (stopped: SIGSTOP or a debugger), so it does not know which peer is late";
    throw CommError(os.str());
  }
  if (!absent.empty()) os << "ranks " << rank_list(absent) << " never arrived";
  if (!stalled.empty())
    os << (absent.empty() ? "" : ", ") << "ranks " << rank_list(stalled) << " stopped inside it";
  os << where.str();
  throw CommError(os.str());
}

void ShmEngine::check_fingerprints(const CollectiveOp& op) const {
  const int i = static_cast<int>(op.seq % 2);
  const Fingerprint& f0 = ctl(0).fp[i];
  int r = 1;
  while (r < size_ && ctl(r).fp[i] == f0) ++r;
  if (r == size_) return;  // the usual case, without building an ostringstream (~0.3 us)
  std::ostringstream os;
  for (; r < size_; ++r) {
    const Fingerprint& f = ctl(r).fp[i];
    if (f == f0) continue;
    os << (os.tellp() > 0 ? ", " : "") << "rank " << r << " called " << f.str();
  }
  throw CommError(detail::concat("collective mismatch at seq ", op.seq, ": rank 0 called ",
                                 f0.str(), " but ", os.str()));
}

}  // namespace braid::comm
