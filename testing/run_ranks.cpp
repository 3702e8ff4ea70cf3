#include "testing/run_ranks.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "braid/comm/local/local_group.h"
#include "braid/core/error.h"

namespace braid::testing {

std::string what(const std::exception_ptr& e) {
  if (!e) return "";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown exception";
  }
}

std::vector<std::exception_ptr> run_ranks_collect(int n, const RankFn& fn,
                                                  const RunRanksOptions& options) {
  auto groups = comm::LocalGroup::create(n, options.group);
  std::vector<std::exception_ptr> errors(n);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<bool> finished(n, false);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(*groups[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
      // Leaving the group marks this rank gone, so peers still waiting on it fail at once.
      groups[r].reset();
      {
        std::lock_guard lock(mu);
        finished[r] = true;
      }
      cv.notify_all();
    });
  }
  {
    std::unique_lock lock(mu);
    auto all = [&] {
      for (bool f : finished)
        if (!f) return false;
      return true;
    };
    if (!cv.wait_for(lock, options.limit, all)) {
      std::string stuck;
      for (int r = 0; r < n; ++r)
        if (!finished[r]) stuck += " " + std::to_string(r);
      std::fprintf(stderr, "run_ranks: ranks%s still running after %lld ms; aborting\n",
                   stuck.c_str(), static_cast<long long>(options.limit.count()));
      std::fflush(stderr);
      std::abort();
    }
  }
  for (auto& t : threads) t.join();
  return errors;
}

void run_ranks(int n, const RankFn& fn, const RunRanksOptions& options) {
  auto errors = run_ranks_collect(n, fn, options);
  for (int r = 0; r < n; ++r)
    if (errors[r]) ADD_FAILURE() << "rank " << r << " of " << n << ": " << what(errors[r]);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace braid::testing
