// Mixed precision in training (docs/design.md "Precision"): fp16 loss scaling across ranks, and
// non-finite steps (Note [Non-finite steps]): a NaN in one rank's batch is named in one line
// (rank, step, tensor) on every rank, or skipped and counted.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "braid/kernels/ops.h"
#include "testing/run_ranks.h"
#include "testing/tensor_compare.h"
#include "testing/train/strategy_parity_util.h"

namespace braid::train {
namespace {

// Runs cfg on n thread ranks with a NaN injected into rank nan_rank's batch of step nan_step;
// returns each rank's error ("" when it finished) and each rank's result.
struct NanRun {
  std::vector<std::string> errors;
  std::vector<TrainResult> results;
  std::vector<Tensor> weights;
};

NanRun run_with_nan(int n, const config::TrainConfig& cfg, int nan_rank, int64_t nan_step) {
  NanRun out;
  out.results.resize(static_cast<size_t>(n));
  out.weights.resize(static_cast<size_t>(n));
  std::mutex mu;
  auto errors = braid::testing::run_ranks_collect(n, [&](comm::ProcessGroup& pg) {
    TrainerOptions o = quiet();
    const int rank = pg.rank();
    o.inject_nan = [=](int64_t step) { return rank == nan_rank && step == nan_step; };
    Trainer t(cfg, borrow(pg), o);
    TrainResult r = t.run();
    Tensor w = t.gather_parameters();
    std::lock_guard<std::mutex> lock(mu);
    out.results[static_cast<size_t>(rank)] = r;
    out.weights[static_cast<size_t>(rank)] = w;
  });
  for (auto& e : errors) out.errors.push_back(braid::testing::what(e));
  return out;
}

TEST(NonFinite, ANanInOneRanksBatchIsNamedWithRankStepAndTensorOnEveryRank) {
  for (const char* strategy : {"ddp", "zero3"}) {
    config::TrainConfig c = parity_config("true");
    c.parallel.strategy = strategy;
    c.training.detect_anomaly = true;
    const NanRun run = run_with_nan(2, c, 1, 3);
    for (const std::string& e : run.errors) {
      EXPECT_NE(e.find("step 3: inf/nan in training: first on rank 1: activation: output of "
                       "'transformer.wte' (forward, micro-step 0)"),
                std::string::npos)
          << strategy << ": " << e;
      EXPECT_EQ(e.find('\n'), std::string::npos) << "one line: " << e;
    }
  }
}

TEST(NonFinite, WithoutAnomalyDetectionTheRankWithTheNonFiniteLossIsNamed) {
  config::TrainConfig c = parity_config("false");
  const NanRun run = run_with_nan(2, c, 0, 2);
  for (const std::string& e : run.errors)
    EXPECT_NE(e.find("step 2: inf/nan in training: first on rank 0: loss"), std::string::npos) << e;
}

TEST(NonFinite, SkipSkipsTheStepOnEveryRankAndCountsIt) {
  config::TrainConfig c = parity_config("true");
  c.training.on_nonfinite = "skip";
  c.training.detect_anomaly = true;
  const NanRun run = run_with_nan(2, c, 1, 2);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(run.errors[r], "");
    EXPECT_EQ(run.results[r].skipped_steps, 1);
    EXPECT_TRUE(std::isfinite(run.results[r].last_loss));
  }
  EXPECT_TRUE(braid::testing::bit_equal(run.weights[0], run.weights[1]));
  EXPECT_TRUE(std::isfinite(kernels::max_abs(run.weights[0])));
}

// fp16: an overflow on one rank skips the step on every rank; with DeepSpeed's default
// hysteresis 2 the first overflow keeps the scale. A clean fp16 run tracks fp32.
TEST(Fp16, AnOverflowOnOneRankSkipsTheStepEverywhereAndTheRunTracksFp32) {
  config::TrainConfig c = parity_config("true");
  const Tensor fp32 = train_ranks(2, c);
  c.training.precision = "fp16";
  const Tensor fp16 = train_ranks(2, c);
  EXPECT_FALSE(braid::testing::bit_equal(fp16, fp32));
  // A few near-zero weights differ by up to two Adam steps (lr 1e-3) where the sign of a tiny
  // gradient differs.
  EXPECT_TRUE(braid::testing::all_close(fp16, fp32, 0.0, 2.5e-3));
  const NanRun run = run_with_nan(2, c, 1, 2);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(run.errors[r], "");
    EXPECT_EQ(run.results[r].skipped_steps, 1);
  }
  EXPECT_TRUE(braid::testing::bit_equal(run.weights[0], run.weights[1]));
}

TEST(Fp16, BadScalerSettingsAreOneErrorNamingTheKey) {
  config::TrainConfig c = parity_config("true");
  c.training.precision = "fp16";
  c.fp16.loss_scale_window = 0;
  try {
    config::validate(c);
    FAIL() << "accepted loss_scale_window 0";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("loss_scale_window = 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace braid::train
