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
      } else if (stopping_) {
        return;  // sends/recvs still in flight are failed by the group's destructor
      }
    }
    if (task) task();
    polling = poll_ ? poll_() : false;
  }
}

}  // namespace braid::comm
