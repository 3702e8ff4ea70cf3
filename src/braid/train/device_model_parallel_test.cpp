// Model parallelism with several ranks on a device (Note [Training device]): pipeline stages,
// tensor-parallel slices and context-parallel sequence shards whose weights, activations and
// gradients live on the simulated device (host access outside a kernel throws: Note [Simulated
// device]), their metadata and the vocabulary-parallel loss's row statistics on the host (Note
// [Pipeline metadata on the host], Note [Vocabulary-parallel statistics on the host]), give the
// CPU run's weights bit for bit on thread ranks, and samples from them the CPU's tokens.
#include "testing/train/context_parallel_parity_util.h"
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

// Context parallelism: ring attention (zig-zag split, GPT-2; its merges and row slices are
// kernels) and Ulysses (LLaMA with GQA, its all-to-all layouts), in fp32 and bf16; dp 2 x cp 2
// (ZeRO-2) on 4 ranks.
TEST_F(DeviceRanks, ContextParallelGivesTheCpuWeightsBitForBit) {
  auto layout = [](const std::string& preset, const std::string& mode, int world,
                   const std::string& strategy = "none") {
    CpLayout l;
    l.world = world;
    l.preset = preset;
    l.mode = mode;
    l.strategy = strategy;
    return cp_parity_config(l);
  };
  for (const char* precision : {"fp32", "bf16"}) {
    config::TrainConfig ring = layout("gpt2-tiny", "ring", 2);
    ring.training.precision = precision;
    EXPECT_TRUE(
        braid::testing::bit_equal(train_on(2, ring, "cuda", false), train_on(2, ring, "cpu")))
        << "ring " << precision;
  }
  const config::TrainConfig ulysses = layout("llama-tiny", "ulysses", 2);
  EXPECT_TRUE(
      braid::testing::bit_equal(train_on(2, ulysses, "cuda", false), train_on(2, ulysses, "cpu")))
      << "ulysses";
  const config::TrainConfig dp_cp = layout("gpt2-tiny", "ring", 4, "zero2");
  EXPECT_TRUE(
      braid::testing::bit_equal(train_on(4, dp_cp, "cuda", false), train_on(4, dp_cp, "cpu")))
      << "dp 2 x cp 2 zero2";
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
