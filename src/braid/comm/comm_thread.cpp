#include "braid/comm/comm_thread.h"

#include <chrono>

namespace braid::comm {

CommThread::CommThread(std::function<bool()> poll) : poll_(std::move(poll)) {
  thread_ = std::thread([this] { loop(); });
}

CommThread::~CommThread() {
  stop();
}

void CommThread::post(Task task) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(task));
    queued_.store(queue_.size(), std::memory_order_release);
  }
  cv_.notify_one();
}

void CommThread::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

bool CommThread::lock_if_idle(std::unique_lock<std::mutex>& run, bool settling) {
  if (queued_.load(std::memory_order_acquire) != 0) return false;
  if (!run.try_lock()) {
    if (!settling) return false;  // a task is running: queue behind it
    // The caller has just seen the last task's op complete, and this thread still holds
    // run_mu_ for its last few hundred nanoseconds (poll, unlock). Wait for that, yielding in
    // case it shares this core, rather than queue behind it and keep every later op queued.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
    do {
      std::this_thread::yield();
      if (std::chrono::steady_clock::now() > give_up) return false;
    } while (!run.try_lock());
  }
  if (queued_.load(std::memory_order_acquire) == 0 && !in_flight_) return true;
  run.unlock();
  return false;
}

void CommThread::loop() {
  for (;;) {
    // Ops usually come back to back: look for the next one briefly before sleeping.
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    while (queued_.load(std::memory_order_acquire) == 0 &&
           std::chrono::steady_clock::now() < spin_until)
      std::this_thread::yield();
    {
      std::unique_lock lock(mu_);
      auto ready = [&] { return !queue_.empty() || stopping_; };
      if (in_flight_) {  // only this thread writes it
        cv_.wait_for(lock, std::chrono::microseconds(100), ready);
      } else {
        cv_.wait(lock, ready);
      }
      if (queue_.empty() && stopping_)
        return;  // sends/recvs still in flight are failed by the group's destructor
    }
    // Take the task under run_mu_, so that an inline op (which needs run_mu_ and an empty
    // queue) can never run between this task's leaving the queue and running.
    std::lock_guard run(run_mu_);
    Task task;
    {
      std::lock_guard lock(mu_);
      if (!queue_.empty()) {
        task = std::move(queue_.front());
        queue_.pop_front();
        queued_.store(queue_.size(), std::memory_order_release);
      }
    }
    if (task) task();
    in_flight_ = poll_ ? poll_() : false;
  }
}

}  // namespace braid::comm
