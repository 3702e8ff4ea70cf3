// Note [Auto plan]: parallel.strategy: auto becomes the planner's first choice, or one clear
// error naming the key.
#include "braid/train/auto_plan.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "braid/parallel/cost/machine_profile.h"
#include "testing/run_ranks.h"
#include "testing/train/ddp_parity_util.h"

namespace braid::train {
namespace {

using braid::testing::error_of;
namespace fs = std::filesystem;

// Sets BRAID_MACHINE_PROFILE to a valid profile (or to a missing file) for the test's life.
class ProfileEnv {
 public:
  explicit ProfileEnv(bool exists) : path_(fs::temp_directory_path() / "braid_auto_plan.json") {
    fs::remove(path_);
    if (exists) {
      parallel::cost::MachineProfile m;
      m.name = "test";
      m.cores = 2;
      m.node_memory = int64_t{8} << 30;
      parallel::cost::ComputeRates r;
      r.gemm_gflops_f32 = 50;
      r.gemm_gflops_bf16 = 100;
      r.stream_gbs = 10;
      m.compute.push_back(r);
      for (const char* op : {"all_reduce", "reduce_scatter", "all_gather", "send_recv"}) {
        m.node.ops[op][2] = {10, 5};
      }
      parallel::cost::save_profile(m, path_.string());
    }
    setenv("BRAID_MACHINE_PROFILE", path_.c_str(), 1);
  }
  ~ProfileEnv() {
    unsetenv("BRAID_MACHINE_PROFILE");
    fs::remove(path_);
  }

 private:
  fs::path path_;
};

config::TrainConfig auto_config() {
  config::TrainConfig c = tiny(0, 0, "auto");
  c.training.global_batch_size = 8;
  return c;
}

TEST(AutoPlan, BecomesTheFirstChoiceForTheGlobalBatch) {
  ProfileEnv env(true);
  config::TrainConfig c = auto_config();
  const std::string said = resolve_auto_plan(c, 2, 1);
  EXPECT_NE(said.find("plan: "), std::string::npos) << said;
  // What train_run prints, found in load_run_config's description.
  EXPECT_EQ(auto_plan_line("# batch arithmetic ...\n# " + said + "\n"), said);
  EXPECT_EQ(auto_plan_line("# batch arithmetic ...\n"), "");
  EXPECT_NE(c.parallel.strategy, "auto");
  const int64_t dp = 2 / (c.parallel.tensor_parallel_size * c.parallel.pipeline_parallel_size);
  EXPECT_EQ(c.training.micro_batch_size * c.training.gradient_accumulation_steps * dp, 8);
  EXPECT_EQ(c.training.precision, "fp32");  // kept
  // Not auto: untouched.
  config::TrainConfig d = tiny(2, 1, "ddp");
  EXPECT_EQ(resolve_auto_plan(d, 2, 1), "");
  EXPECT_EQ(d.parallel.strategy, "ddp");
}

TEST(AutoPlan, WhatItCannotPlanIsNamed) {
  {
    ProfileEnv env(false);
    config::TrainConfig c = auto_config();
    const std::string e = error_of([&] { resolve_auto_plan(c, 2, 1); });
    EXPECT_NE(e.find("parallel.strategy: auto: machine profile"), std::string::npos) << e;
    EXPECT_NE(e.find("braid plan --calibrate"), std::string::npos) << e;
  }
  ProfileEnv env(true);
  config::TrainConfig c = auto_config();
  c.training.global_batch_size = 0;
  EXPECT_NE(error_of([&] { resolve_auto_plan(c, 2, 1); }).find("training.global_batch_size"),
            std::string::npos);
  c = auto_config();
  c.training.precision = "fp16";
  EXPECT_NE(error_of([&] { resolve_auto_plan(c, 2, 1); }).find("not training.precision 'fp16'"),
            std::string::npos);
  c = auto_config();
  c.memory.budget = "1MiB";
  EXPECT_NE(error_of([&] { resolve_auto_plan(c, 2, 1); }).find("No layout fits"),
            std::string::npos);
}

}  // namespace
}  // namespace braid::train
