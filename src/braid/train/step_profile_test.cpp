// Note [Step profile]: the parts of a step, measured after the warm-up, and the report beside
// the step-time model's prediction.
#include "braid/train/step_profile.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "braid/kernels/ops.h"
#include "braid/parallel/cost/machine_profile.h"
#include "testing/train/ddp_parity_util.h"

namespace braid::train {
namespace {

TEST(StepProfile, OpsCountInTheirParts) {
  EXPECT_EQ(profile_part("matmul"), "gemm");
  EXPECT_EQ(profile_part("linear_backward"), "gemm");
  EXPECT_EQ(profile_part("attention_forward"), "attention");
  EXPECT_EQ(profile_part("lm_head_ce_forward_backward"), "loss");
  EXPECT_EQ(profile_part("adamw_step"), "optimizer");
  EXPECT_EQ(profile_part("sum_squares_fixed"), "optimizer");
  EXPECT_EQ(profile_part("layernorm_backward"), "memory-bound");
  EXPECT_EQ(profile_part("axpy"), "memory-bound");
}

TEST(StepProfile, StepsAfterTheWarmUpSplitIntoParts) {
  StepProfile p(true, 2);
  Tensor a = Tensor::zeros({1 << 16}), b = Tensor::zeros({1 << 16});
  for (int64_t i = 0; i < 4; ++i) {
    p.begin_step(i);
    kernels::add_forward(a, a, b);
    p.end_step(0.5, 100, 0.2);  // 100 ms exposed, a fifth of the step idle
  }
  kernels::add_forward(a, a, b);  // between steps: not counted
  EXPECT_EQ(p.profiled_steps(), 2);
  const auto ms = p.measured_ms();
  EXPECT_DOUBLE_EQ(ms.at("step"), 500);
  EXPECT_DOUBLE_EQ(ms.at("comm exposed"), 100);
  EXPECT_DOUBLE_EQ(ms.at("pipeline bubble"), 100);
  EXPECT_GT(ms.at("memory-bound"), 0);
  EXPECT_NEAR(ms.at("other"), 300 - ms.at("memory-bound"), 1e-9);
  const std::string report = p.report(std::nullopt, "no prediction: none");
  EXPECT_NE(report.find("2 steps after 2 warm-up"), std::string::npos) << report;
  EXPECT_NE(report.find("| add_forward | memory-bound | 1.0 |"), std::string::npos) << report;
}

TEST(StepProfile, ATrainingRunReportsItsPartsBesideThePrediction) {
  namespace fs = std::filesystem;
  // A profile for the model to predict with (the synthetic numbers only need to be valid).
  parallel::cost::MachineProfile m;
  m.name = "test";
  m.cores = 1;
  m.node_memory = int64_t{8} << 30;
  parallel::cost::ComputeRates r;
  r.gemm_gflops_f32 = r.gemm_gflops_bf16 = 10;
  r.stream_gbs = 5;
  m.compute.push_back(r);
  const fs::path file = fs::temp_directory_path() / "braid_step_profile_test.json";
  parallel::cost::save_profile(m, file.string());
  setenv("BRAID_MACHINE_PROFILE", file.c_str(), 1);
  config::TrainConfig c = tiny(2, 1, "none");
  c.training.max_steps = 5;
  c.output.profile = true;
  ::testing::internal::CaptureStdout();
  Trainer(c, nullptr, quiet()).run();
  const std::string out = ::testing::internal::GetCapturedStdout();
  unsetenv("BRAID_MACHINE_PROFILE");
  fs::remove(file);
  EXPECT_NE(out.find("profile: rank 0, 3 steps after 2 warm-up"), std::string::npos) << out;
  EXPECT_NE(out.find("| part | measured | predicted | error |"), std::string::npos) << out;
  EXPECT_NE(out.find("predicted: none mb2x1"), std::string::npos) << out;
  EXPECT_NE(out.find("| linear_forward | gemm |"), std::string::npos) << out;
  EXPECT_NE(out.find("| adamw_step | optimizer |"), std::string::npos) << out;
}

}  // namespace
}  // namespace braid::train
