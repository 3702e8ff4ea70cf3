// Shared by the memory tests (strategy_memory_test, memory_estimate_test): one rank's tracker
// peaks per category after a short run on thread-backed ranks, and their comparison with the
// estimator (parallel/estimate/memory_estimate.h) given what those ranks run with: the Trainer's
// threads per rank and run_ranks' local groups with their small shm slots.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "braid/launch/threads.h"
#include "braid/parallel/estimate/memory_estimate.h"
#include "braid/train/memory_estimate_table.h"
#include "testing/run_ranks.h"
#include "testing/train/strategy_parity_util.h"

namespace braid::train {

struct Peaks {
  int64_t parameters = 0, gradients = 0, optimizer_state = 0, activations = 0, communication = 0,
          scratch = 0;
};

// The estimator's inputs for c on `ranks` ranks as measure_peaks runs them.
inline parallel::MemoryEstimateInputs thread_rank_inputs(const config::TrainConfig& c, int ranks) {
  RankRuntime runtime;
  runtime.threads = launch::threads_per_rank();  // what the Trainer applies (launch/threads.h)
  runtime.backend.kind = "local";
  runtime.backend.shm_slot_bytes =
      static_cast<int64_t>(braid::testing::RunRanksOptions::default_group().shm_slot_bytes);
  return memory_estimate_inputs(c, ranks, runtime);
}

// Every rank's peaks after one run of c on `ranks` thread-backed ranks.
inline std::vector<Peaks> measure_all_peaks(const config::TrainConfig& c, int ranks) {
  std::vector<Peaks> out(static_cast<size_t>(ranks));
  std::mutex mu;
  braid::testing::run_ranks(ranks, [&](comm::ProcessGroup& pg) {
    Trainer t(c, borrow(pg), quiet());
    t.run();
    const MemoryTracker& m = *t.memory();
    std::lock_guard<std::mutex> lock(mu);
    out[static_cast<size_t>(pg.rank())] = {
        m.peak(MemCategory::parameters),      m.peak(MemCategory::gradients),
        m.peak(MemCategory::optimizer_state), m.peak(MemCategory::activations),
        m.peak(MemCategory::communication),   m.peak(MemCategory::scratch)};
  });
  return out;
}

inline Peaks measure_peaks(const config::TrainConfig& c, int ranks, int rank = 0) {
  return measure_all_peaks(c, ranks)[static_cast<size_t>(rank)];
}

inline ::testing::AssertionResult within_10_percent(int64_t measured, int64_t estimated,
                                                    const char* what) {
  const double diff = std::abs(static_cast<double>(measured - estimated));
  if (diff <= 0.1 * static_cast<double>(estimated)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": measured " << measured << " bytes, estimated " << estimated << " (off by "
         << 100 * diff / static_cast<double>(estimated) << "%)";
}

// One line: measured (estimated) bytes per category.
inline void print_comparison(const std::string& name, const Peaks& p,
                             const parallel::MemoryEstimate& e) {
  auto ll = [](int64_t v) { return static_cast<long long>(v); };
  std::printf(
      "%-40s params %9lld (%9lld) grads %9lld (%9lld) optimizer %9lld (%9lld) activations "
      "%9lld (%9lld) communication %7lld (%7lld) scratch %8lld (%8lld)\n",
      name.c_str(), ll(p.parameters), ll(e.parameters), ll(p.gradients), ll(e.gradients),
      ll(p.optimizer_state), ll(e.optimizer_state), ll(p.activations), ll(e.activations),
      ll(p.communication), ll(e.communication), ll(p.scratch), ll(e.scratch));
}

// Every category. unsent_bytes > 0: a pipeline stage on ranks as threads, whose buffered sends
// the peer stage takes when its timing lets it (Note [Buffer estimate]): its communication lies
// between the estimate (one send) and unsent_bytes more.
inline void expect_within_10_percent(const std::string& name, const Peaks& p,
                                     const parallel::MemoryEstimate& e, int64_t unsent_bytes = 0) {
  EXPECT_TRUE(within_10_percent(p.parameters, e.parameters, "parameters")) << name;
  // A reduction that ends before the next block's backward begins: one block fewer
  // (MemoryEstimate::gradients_overlap).
  EXPECT_TRUE(within_10_percent(p.gradients, e.gradients, "gradients") ||
              within_10_percent(p.gradients, e.gradients - e.gradients_overlap, "gradients"))
      << name << ": gradients measured " << p.gradients << ", estimated " << e.gradients
      << " or, every reduction done before the next block, " << e.gradients - e.gradients_overlap;
  EXPECT_TRUE(within_10_percent(p.optimizer_state, e.optimizer_state, "optimizer state")) << name;
  EXPECT_TRUE(within_10_percent(p.activations, e.activations, "activations")) << name;
  if (unsent_bytes == 0) {
    EXPECT_TRUE(within_10_percent(p.communication, e.communication, "communication")) << name;
  } else {
    EXPECT_GE(p.communication, e.communication) << name << ": communication";
    EXPECT_LE(p.communication, e.communication + unsent_bytes + 1024) << name << ": communication";
  }
  EXPECT_TRUE(within_10_percent(p.scratch, e.scratch, "scratch")) << name;
}

}  // namespace braid::train
