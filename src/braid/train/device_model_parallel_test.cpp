// Model parallelism with several ranks on a device (Note [Training device]): pipeline stages
// whose weights, activations and gradients live on the simulated device (host access outside a
// kernel throws: Note [Simulated device]), their metadata on the host (Note [Pipeline metadata
// on the host]), give the CPU run's weights bit for bit on thread ranks.
#include "testing/train/device_ranks_util.h"
#include "testing/train/pipeline_parity_util.h"

namespace braid::train {
namespace {

// pp_parity_config (4 micro-batches, clipping) for 2 steps: the tests' time budget.
config::TrainConfig pipeline(const std::string& schedule, const std::string& strategy = "none") {
  PipelineLayout l;
  l.schedule = schedule;
  l.strategy = strategy;
  config::TrainConfig c = pp_parity_config(l);
  c.training.max_steps = 2;
  return c;
}

// pp 2, schedule by schedule, fp32; 1f1b also in bf16.
TEST_F(DeviceRanks, PipelineGivesTheCpuWeightsBitForBit) {
  for (const char* schedule : {"1f1b", "gpipe", "zb_h1"}) {
    const config::TrainConfig c = pipeline(schedule);
    EXPECT_TRUE(braid::testing::bit_equal(train_on(2, c, "cuda", false), train_on(2, c, "cpu")))
        << schedule;
  }
  config::TrainConfig bf16 = pipeline("1f1b");
  bf16.training.precision = "bf16";
  EXPECT_TRUE(braid::testing::bit_equal(train_on(2, bf16, "cuda", false), train_on(2, bf16, "cpu")))
      << "1f1b bf16";
}

// dp 2 (ZeRO-1) x pp 2 on 4 ranks.
TEST_F(DeviceRanks, PipelineMixesGiveTheCpuWeightsBitForBit) {
  const config::TrainConfig zero1 = pipeline("1f1b", "zero1");
  EXPECT_TRUE(
      braid::testing::bit_equal(train_on(4, zero1, "cuda", false), train_on(4, zero1, "cpu")))
      << "zero1 x pp2";
}

}  // namespace
}  // namespace braid::train
