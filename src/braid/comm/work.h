// Work: the handle of one asynchronous operation on a ProcessGroup.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "braid/comm/op.h"

namespace braid::comm {

class Work {
 public:
  // wait_limit bounds wait(): the comm thread always finishes or fails an op within the group's
  // timeout, so a wait that outlives it means the comm thread itself is stuck. prefix names the
  // group ("group 'world' rank 0: "), shared by its Works (Note [Lazy descriptions], op.h).
  Work(const OpSummary& op, std::shared_ptr<const std::string> prefix,
       std::chrono::milliseconds wait_limit);

  // Blocks until the operation finished; rethrows its failure (a CommError naming the group,
  // operation, sequence number and ranks).
  void wait();
  bool is_completed() const;

  OpType op() const { return op_.type(); }
  uint64_t seq() const { return op_.fp.seq; }  // collectives: 1, 2, ... per group; p2p too
  // "group 'world' rank 0: all_reduce seq 5 (f32, count 1024, sum)", formatted on each call.
  std::string description() const { return *prefix_ + op_.str(); }

  // Backend side: exactly one of these, once. A failure is kept as its message and every
  // wait() throws a fresh CommError, so no exception object is shared between threads.
  void mark_done();
  void mark_failed(std::exception_ptr error);
  void mark_failed(const std::string& message);

 private:
  OpSummary op_;
  std::shared_ptr<const std::string> prefix_;
  std::chrono::milliseconds wait_limit_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::atomic<bool> done_flag_{false};  // done_, readable without the lock (spin in wait)
  bool failed_ = false;
  std::string error_;
};

}  // namespace braid::comm
