// Model parallelism with several ranks on a device (Note [Training device]): pipeline stages and
// tensor-parallel slices whose weights, activations and gradients live on the simulated device
// (host access outside a kernel throws: Note [Simulated device]), their metadata and the
// vocabulary-parallel loss's row statistics on the host (Note [Pipeline metadata on the host],
// Note [Vocabulary-parallel statistics on the host]), give the CPU run's weights bit for bit on
// thread ranks, and samples from them the CPU's tokens.
#include "testing/train/device_ranks_util.h"
#include "testing/train/tensor_parallel_parity_util.h"

namespace braid::train {
namespace {

// pp 2, schedule by schedule (zb_v hands its V's turn over on the device), fp32; 1f1b also in
// bf16.
TEST_F(DeviceRanks, PipelineGivesTheCpuWeightsBitForBit) {
  for (const char* schedule : {"1f1b", "gpipe", "zb_h1", "zb_v"}) {
    const config::TrainConfig c = pipeline(schedule);
    EXPECT_TRUE(braid::testing::bit_equal(train_on(2, c, "cuda", false), train_on(2, c, "cpu")))
        << schedule;
  }
  config::TrainConfig bf16 = pipeline("1f1b");
  bf16.training.precision = "bf16";
  EXPECT_TRUE(braid::testing::bit_equal(train_on(2, bf16, "cuda", false), train_on(2, bf16, "cpu")))
      << "1f1b bf16";
}

// dp 2 (ZeRO-1) x pp 2, and tp 2 (sequence parallel) x pp 2, on 4 ranks.
TEST_F(DeviceRanks, PipelineMixesGiveTheCpuWeightsBitForBit) {
  const config::TrainConfig zero1 = pipeline("1f1b", "zero1");
  EXPECT_TRUE(
      braid::testing::bit_equal(train_on(4, zero1, "cuda", false), train_on(4, zero1, "cpu")))
      << "zero1 x pp2";
  config::TrainConfig tp = pipeline("1f1b");
  tp.parallel.tensor_parallel_size = 2;
  tp.parallel.sequence_parallel = true;
  EXPECT_TRUE(braid::testing::bit_equal(train_on(4, tp, "cuda", false), train_on(4, tp, "cpu")))
      << "tp2 sp x pp2";
}

// tp 2 (4 steps, accumulation 2, clipping: tp_parity_config), GPT-2 (tied, vocabulary-parallel
// loss) and LLaMA, with and without sequence parallelism; GPT-2 also in bf16.
TEST_F(DeviceRanks, TensorParallelGivesTheCpuWeightsBitForBit) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny"})
    for (bool sp : {false, true}) {
      const config::TrainConfig c = tp_parity_config(preset, 2, sp, "none");
      EXPECT_TRUE(braid::testing::bit_equal(train_on(2, c, "cuda", false), train_on(2, c, "cpu")))
          << preset << (sp ? " sp" : "");
    }
  config::TrainConfig bf16 = tp_parity_config("gpt2-tiny", 2, true, "none");
  bf16.training.precision = "bf16";
  EXPECT_TRUE(braid::testing::bit_equal(train_on(2, bf16, "cuda", false), train_on(2, bf16, "cpu")))
      << "bf16";
}

// Samples through a zb_v pipeline (the logits come from the first stage: the V's end) and
// through tp 2 (vocabulary-parallel logits gathered): the CPU's tokens.
TEST_F(DeviceRanks, SamplesThroughModelParallelismGiveTheCpuTokens) {
  const config::TrainConfig pp = pipeline("zb_v");
  const std::vector<int32_t> cpu = samples_on(2, pp, "cpu");
  EXPECT_EQ(cpu.size(), 11u);
  EXPECT_EQ(samples_on(2, pp, "cuda"), cpu) << "pp 2 zb_v";
  const config::TrainConfig tp = tp_parity_config("gpt2-tiny", 2, false, "none");
  EXPECT_EQ(samples_on(2, tp, "cuda"), samples_on(2, tp, "cpu")) << "tp 2";
}

}  // namespace
}  // namespace braid::train
