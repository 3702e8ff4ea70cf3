// CommThread: the one thread on which a ProcessGroup runs its operations, in issue order.
// Note [Comm threads] in DESIGN.md: one per group, so groups never wait on each other's queues.
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
  void stop();  // idempotent; same as the destructor
  bool on_this_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  void loop();

  std::function<bool()> poll_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  std::atomic<size_t> queued_{0};  // queue_.size(), readable without the lock
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace braid::comm
