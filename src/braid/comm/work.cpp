#include "braid/comm/work.h"

#include <thread>

#include "braid/core/error.h"

namespace braid::comm {

Work::Work(const OpSummary& op, std::shared_ptr<const std::string> prefix,
           std::chrono::milliseconds wait_limit)
    : op_(op), prefix_(std::move(prefix)), wait_limit_(wait_limit) {}

void Work::wait() {
  // Done already (always, for a collective that ran inline: Note [Inline collectives] in
  // process_group.h): failed_ and error_ were written before the release of done_flag_ and
  // never change after it.
  if (done_flag_.load(std::memory_order_acquire)) {
    if (failed_) throw CommError(error_);
    return;
  }
  // Most waits end within microseconds of the op: poll briefly (yielding, so a comm thread on
  // the same core runs) before sleeping on the condition variable, which costs a futex wake-up.
  const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
  while (!done_flag_.load(std::memory_order_acquire) &&
         std::chrono::steady_clock::now() < spin_until)
    std::this_thread::yield();
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, wait_limit_, [&] { return done_; })) {
    throw CommError(detail::concat(description(), ": not finished after ", wait_limit_.count(),
                                   " ms; the communication thread is stuck"));
  }
  if (failed_) throw CommError(error_);
}

bool Work::is_completed() const {
  return done_flag_.load(std::memory_order_acquire);
}

void Work::mark_done() {
  {
    std::lock_guard lock(mu_);
    done_ = true;
    done_flag_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

void Work::mark_failed(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    mark_failed(std::string(e.what()));
  } catch (...) {
    mark_failed(description() + ": failed with an unknown exception");
  }
}

void Work::mark_failed(const std::string& message) {
  {
    std::lock_guard lock(mu_);
    error_ = message;
    failed_ = true;
    done_ = true;
    done_flag_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

}  // namespace braid::comm
