// Strategy parity on thread-backed ranks (Note [Parity setting], strategy_parity_util.h): at the
// same world size every data-parallel strategy gives DDP's weights bit for bit, in both
// accumulation modes, and matches one process to fp32 tolerance.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include "braid/checkpoint/hf_model_io.h"

#include "testing/run_ranks.h"
#include "testing/tensor_compare.h"
#include "testing/train/strategy_parity_util.h"

namespace braid::train {
namespace {

struct Case {
  int ranks;
  std::string sync_each_batch;
};

// Every strategy variant that fits n ranks, trained from base, gives `ddp` bit for bit (and,
// when given, `single`'s weights to fp32 tolerance).
void expect_every_strategy_gives(const Tensor& ddp, const config::TrainConfig& base, int n,
                                 const Tensor* single = nullptr) {
  for (const StrategyVariant& v : strategy_variants()) {
    if (n < v.min_ranks || n % v.rank_divisor != 0) continue;
    config::TrainConfig c = base;
    v.apply(c);
    const Tensor w = train_ranks(n, c);
    EXPECT_TRUE(braid::testing::bit_equal(w, ddp)) << v.name << " vs ddp";
    if (single) {
      EXPECT_TRUE(weights_match(w, *single)) << v.name << " vs one process";
    }
  }
}

class StrategyParity : public ::testing::TestWithParam<Case> {};

TEST_P(StrategyParity, EveryStrategyGivesDdpsWeightsBitForBit) {
  const auto [n, sync] = GetParam();
  const config::TrainConfig base = parity_config(sync);
  const Tensor ddp = train_ranks(n, base);
  config::TrainConfig one = base;
  one.parallel.strategy = "none";
  one.training.micro_batch_size = n;
  const Tensor single = train_one(one);
  EXPECT_TRUE(weights_match(ddp, single)) << "ddp vs one process";
  config::TrainConfig unclipped = one;
  unclipped.optimizer.grad_clip = 0;
  EXPECT_FALSE(braid::testing::bit_equal(train_one(unclipped), single)) << "clipping is active";
  expect_every_strategy_gives(ddp, base, n, &single);
}

INSTANTIATE_TEST_SUITE_P(Modes, StrategyParity,
                         ::testing::Values(Case{2, "true"}, Case{2, "false"}, Case{4, "true"},
                                           Case{4, "false"}, Case{3, "true"}),
                         [](const auto& info) {
                           return std::to_string(info.param.ranks) + "_ranks_sync_each_batch_" +
                                  info.param.sync_each_batch;
                         });

}  // namespace
}  // namespace braid::train

namespace braid::train {
namespace {

std::string file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// HF export from a sharded layout, gathered unit by unit, is the same file as DDP's; a sharded
// run started from it (model.init_from, each rank reading only its shards) holds the same weights.
TEST(StrategyExport, ShardedExportAndImportMatchDdp) {
  namespace fs = std::filesystem;
  const fs::path root = private_temp_dir("braid_strategy_export");
  fs::remove_all(root);
  config::TrainConfig base = parity_config("true");
  base.output.export_model = true;
  std::vector<std::string> files;
  for (const char* strategy : {"ddp", "zero3"}) {
    config::TrainConfig c = base;
    c.parallel.strategy = strategy;
    c.output.dir = (root / strategy).string();
    train_ranks(2, c);
    files.push_back(file_bytes(root / strategy / "model" / "model.safetensors"));
  }
  ASSERT_GT(files[0].size(), 1000u);
  EXPECT_TRUE(files[0] == files[1]) << "zero3's export differs from ddp's";

  for (const char* strategy : {"zero3", "zero2"}) {
    config::TrainConfig c = base;
    c.parallel.strategy = strategy;
    c.model.preset = "";
    c.model.init_from = (root / "ddp" / "model").string();
    c.output.export_model = false;
    std::vector<Tensor> loaded(2);
    braid::testing::run_ranks(2, [&](comm::ProcessGroup& pg) {
      Trainer t(c, borrow(pg), quiet());
      loaded[static_cast<size_t>(pg.rank())] = t.gather_parameters();
    });
    auto reference = checkpoint::import_hf(root / "ddp" / "model", false);
    EXPECT_TRUE(braid::testing::bit_equal(loaded[0], reference->flat().params())) << strategy;
    EXPECT_TRUE(braid::testing::bit_equal(loaded[1], loaded[0])) << strategy;
  }
}

}  // namespace
}  // namespace braid::train

namespace braid::train {
namespace {

// Mixed precision (docs/design.md "Precision"): compute copies in bf16 or f16, f32 masters and
// gradients (fp16 with its loss scale). Every strategy still gives DDP's weights bit for bit at
// the same world size (they all cast the same masters and reduce the same f32 gradients), and
// the run really computes in the low dtype: its weights differ from the fp32 run's, but only by
// what the rounding explains.
struct PrecisionCase {
  std::string precision;
  std::string sync_each_batch;
};

class StrategyParityMixed : public ::testing::TestWithParam<PrecisionCase> {};

TEST_P(StrategyParityMixed, EveryStrategyGivesDdpsWeightsBitForBit) {
  const auto& [precision, sync] = GetParam();
  config::TrainConfig base = parity_config(sync);
  const Tensor fp32 = train_ranks(2, base);
  base.training.precision = precision;
  const Tensor ddp = train_ranks(2, base);
  EXPECT_FALSE(braid::testing::bit_equal(ddp, fp32)) << precision << " must differ from fp32";
  EXPECT_TRUE(braid::testing::all_close(ddp, fp32, 0.0, 2.5e-3)) << precision << " vs fp32";
  config::TrainConfig one = base;
  one.parallel.strategy = "none";
  one.training.micro_batch_size = 2;
  EXPECT_TRUE(braid::testing::all_close(train_one(one), ddp, 0.0, 5e-4)) << "one process vs ddp";
  expect_every_strategy_gives(ddp, base, 2);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, StrategyParityMixed,
    ::testing::Values(PrecisionCase{"bf16", "true"}, PrecisionCase{"bf16", "false"},
                      PrecisionCase{"fp16", "true"}, PrecisionCase{"fp16", "false"}),
    [](const auto& info) {
      return info.param.precision + "_sync_each_batch_" + info.param.sync_each_batch;
    });

}  // namespace
}  // namespace braid::train

namespace braid::train {
namespace {

// training.reduce_dtype (Note [Reduce dtype]): gradients reduced in bf16 send half the bytes,
// really round (the weights differ from an f32 reduction, within what bf16 explains), and
// every strategy still gives DDP's weights bit for bit at 2 ranks.
TEST(ReduceDtype, Bf16ReductionHalvesTheBytesAndKeepsStrategiesOnDdpsWeights) {
  config::TrainConfig base = parity_config("true");
  base.training.precision = "bf16";
  const Tensor f32_reduce = train_ranks(2, base);
  base.training.reduce_dtype = "bf16";
  const Tensor ddp = train_ranks(2, base);
  EXPECT_FALSE(braid::testing::bit_equal(ddp, f32_reduce));
  EXPECT_TRUE(braid::testing::all_close(ddp, f32_reduce, 0.0, 2.5e-3));
  expect_every_strategy_gives(ddp, base, 2);
  for (const char* strategy : {"ddp", "zero2"}) {
    std::vector<int64_t> bytes(2, 0);
    for (const char* reduce : {"fp32", "bf16"}) {
      config::TrainConfig c = base;
      c.parallel.strategy = strategy;
      c.training.reduce_dtype = reduce;
      std::mutex mu;
      braid::testing::run_ranks(2, [&](comm::ProcessGroup& pg) {
        Trainer t(c, borrow(pg), quiet());
        t.run();
        std::lock_guard<std::mutex> lock(mu);
        if (pg.rank() == 0)
          bytes[std::string(reduce) == "bf16"] = t.accelerator().last_step_stats().bytes_reduced;
      });
    }
    EXPECT_GT(bytes[0], 0) << strategy;
    EXPECT_EQ(bytes[1] * 2, bytes[0]) << strategy;
  }
}

// Note [Compute copy in the step] (optim/optimizer.h): AdamW writes the bf16 copy in its own
// pass, SGD has it cast after each slice, before the slice is released, where ZeRO-1/2 start
// exchanging the unit. With SGD every strategy still gives DDP's weights bit for bit.
TEST(ComputeCopy, SgdInBf16KeepsStrategiesOnDdpsWeights) {
  config::TrainConfig base = parity_config("true");
  base.training.precision = "bf16";
  base.optimizer.type = "sgd";
  base.optimizer.momentum = 0.9;
  const Tensor ddp = train_ranks(2, base);
  base.optimizer.type = "adamw";
  EXPECT_FALSE(braid::testing::bit_equal(train_ranks(2, base), ddp)) << "sgd is really used";
  base.optimizer.type = "sgd";
  expect_every_strategy_gives(ddp, base, 2);
}

}  // namespace
}  // namespace braid::train

namespace braid::train {
namespace {

// Note [Recycled tensors] (core/tensor_pool.h): buffers of 64 MiB or more are reused from step to
// step (the fused LM head's weight gradient, ZeRO-3's gathered units and gradients), their
// contents left over from the last step. A model whose tied embedding is a 64 MiB unit in f32
// keeps every strategy on DDP's weights over steps that reuse them, in fp32 (parameters and
// gradients reused) and bf16 (the f32 gradients).
TEST(RecycledBuffers, LargeUnitsReusedFromStepToStepKeepStrategiesOnDdpsWeights) {
  namespace fs = std::filesystem;
  const fs::path dir = private_temp_dir("braid_large_embedding_model");
  fs::create_directories(dir);
  std::ofstream(dir / "config.json")
      << R"({"model_type": "gpt2", "vocab_size": 65536, "n_positions": 32, "n_embd": 256,
             "n_layer": 1, "n_head": 4})";
  ASSERT_GE(size_t{65536} * 256 * 4, Storage::kLargeHostFrom);
  for (const char* precision : {"fp32", "bf16"}) {
    config::TrainConfig base = tiny(1, 1, "ddp");
    base.model.preset = "";
    base.model.config = (dir / "config.json").string();
    base.model.freeze = "";
    base.training.max_steps = 2;
    base.schedule.warmup_steps = 1;
    base.training.precision = precision;
    base.parallel.bucket_mb = 25;
    const Tensor ddp = train_ranks(2, base);
    for (const char* strategy : {"zero2", "zero3"}) {
      config::TrainConfig c = base;
      c.parallel.strategy = strategy;
      EXPECT_TRUE(braid::testing::bit_equal(train_ranks(2, c), ddp))
          << strategy << " " << precision;
    }
  }
}

}  // namespace
}  // namespace braid::train
