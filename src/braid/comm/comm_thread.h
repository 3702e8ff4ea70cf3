// CommThread: the one thread on which a ProcessGroup runs its operations, in issue order.
// Note [Comm threads] in docs/design.md: one per group, so groups never wait on each other's
// queues.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace braid::comm {

class CommThread {
 public:
  using Task = std::function<void()>;

  // poll runs on the thread between tasks and whenever it is idle; it returns true while it
  // has something in flight (then the thread wakes every ~100 us to call it again).
  explicit CommThread(std::function<bool()> poll);
  ~CommThread();  // runs what is queued, then joins
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  void post(Task task);
  // Note [Inline collectives] (process_group.h): runs fn() on the calling thread, in place of
  // this thread's next task, if this thread is idle: nothing queued or running, and poll had
  // nothing in flight. Returns whether fn ran. Callers serialise it with post() (the group's
  // issue lock), so nothing can be queued ahead of what fn posts. `settling`: the last task
  // posted has done its work and is only returning; wait for that briefly instead of failing.
  template <typename Fn>
  bool run_here_if_idle(bool settling, Fn&& fn) {
    std::unique_lock run(run_mu_, std::defer_lock);
    if (!lock_if_idle(run, settling)) return false;
    fn();
    return true;
  }
  void stop();  // idempotent; same as the destructor
  bool on_this_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  void loop();
  bool lock_if_idle(std::unique_lock<std::mutex>& run, bool settling);

  std::function<bool()> poll_;
  std::mutex mu_;  // guards queue_ and stopping_
  std::condition_variable cv_;
  std::deque<Task> queue_;
  std::atomic<size_t> queued_{0};  // queue_.size(), readable without the lock
  // Held while a task is taken from the queue and run, and while poll runs; or by an inline op.
  // So with run_mu_ held and nothing queued, nothing is pending or running.
  std::mutex run_mu_;
  bool in_flight_ = false;  // poll's last answer; written by this thread under run_mu_
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace braid::comm
