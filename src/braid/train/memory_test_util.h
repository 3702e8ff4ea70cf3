// Shared by the memory tests (strategy_memory_test, memory_estimate_test): one rank's tracker
// peaks per category after a short run on thread-backed ranks, and their comparison with the
// estimator (parallel/memory_estimate.h).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <mutex>
#include <string>

#include "braid/parallel/memory_estimate.h"
#include "braid/train/strategy_parity_util.h"

namespace braid::train {

struct Peaks {
  int64_t parameters = 0, gradients = 0, optimizer_state = 0, activations = 0, buffers = 0;
};

inline Peaks measure_peaks(const TrainConfig& c, int ranks, int rank = 0) {
  Peaks out;
  std::mutex mu;
  braid::testing::run_ranks(ranks, [&](comm::ProcessGroup& pg) {
    Trainer t(c, borrow(pg), quiet());
    t.run();
    const MemoryTracker& m = *t.memory();
    std::lock_guard<std::mutex> lock(mu);
    if (pg.rank() != rank) return;
    out = {m.peak(MemCategory::parameters), m.peak(MemCategory::gradients),
           m.peak(MemCategory::optimizer_state), m.peak(MemCategory::activations),
           m.peak(MemCategory::communication) + m.peak(MemCategory::scratch)};
  });
  return out;
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
      "%9lld (%9lld) buffers %8lld (%8lld)\n",
      name.c_str(), ll(p.parameters), ll(e.parameters), ll(p.gradients), ll(e.gradients),
      ll(p.optimizer_state), ll(e.optimizer_state), ll(p.activations), ll(e.activations),
      ll(p.buffers), ll(e.buffers));
}

// Parameters, gradients, optimizer state and activations; buffers are a lower bound (Note
// [Buffer estimate]): the measurement must not be below it.
inline void expect_within_10_percent(const std::string& name, const Peaks& p,
                                     const parallel::MemoryEstimate& e) {
  EXPECT_TRUE(within_10_percent(p.parameters, e.parameters, "parameters")) << name;
  EXPECT_TRUE(within_10_percent(p.gradients, e.gradients, "gradients")) << name;
  EXPECT_TRUE(within_10_percent(p.optimizer_state, e.optimizer_state, "optimizer state")) << name;
  EXPECT_TRUE(within_10_percent(p.activations, e.activations, "activations")) << name;
  EXPECT_GE(p.buffers, e.buffers) << name << ": buffers are a lower bound";
}

}  // namespace braid::train
