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

void CommThread::loop() {
  bool polling = false;
  for (;;) {
    Task task;
    // Ops usually come back to back: look for the next one briefly before sleeping.
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    while (queued_.load(std::memory_order_acquire) == 0 &&
           std::chrono::steady_clock::now() < spin_until)
      std::this_thread::yield();
    {
      std::unique_lock lock(mu_);
      auto ready = [&] { return !queue_.empty() || stopping_; };
      if (polling) {
        cv_.wait_for(lock, std::chrono::microseconds(100), ready);
      } else {
        cv_.wait(lock, ready);
      }
      if (!queue_.empty()) {
        task = std::move(queue_.front());
        queue_.pop_front();
        queued_.store(queue_.size(), std::memory_order_release);
      } else if (stopping_) {
        return;  // sends/recvs still in flight are failed by the group's destructor
      }
    }
    if (task) task();
    polling = poll_ ? poll_() : false;
  }
}

}  // namespace braid::comm
