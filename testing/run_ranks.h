// run_ranks(n, fn): runs fn(group) on n threads, one per rank of a fresh local group. Any rank's
// exception (or gtest failure) fails the test; a rank that throws leaves the group, so the
// others fail promptly instead of waiting; and if the ranks are still running after the time
// limit the process aborts with the ranks that were stuck, so a test can never hang.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <vector>

#include "braid/comm/process_group.h"

namespace braid::testing {

struct RunRanksOptions {
  comm::ProcessGroupOptions group = default_group();
  std::chrono::milliseconds limit = std::chrono::seconds(60);

  // Tests use a short collective timeout and small shm slots (many steps per collective).
  static comm::ProcessGroupOptions default_group() {
    comm::ProcessGroupOptions o;
    o.name = "test";
    o.timeout = std::chrono::seconds(10);
    o.shm_slot_bytes = 4096;
    return o;
  }
};

using RankFn = std::function<void(comm::ProcessGroup&)>;

void run_ranks(int n, const RankFn& fn, const RunRanksOptions& options = {});

// Same, but returns each rank's exception (null when it succeeded) instead of failing.
std::vector<std::exception_ptr> run_ranks_collect(int n, const RankFn& fn,
                                                  const RunRanksOptions& options = {});

std::string what(const std::exception_ptr& e);  // the message of an exception_ptr ("" if null)
// The message of the braid::Error fn throws, or "(no error)".
std::string error_of(const std::function<void()>& fn);

}  // namespace braid::testing
