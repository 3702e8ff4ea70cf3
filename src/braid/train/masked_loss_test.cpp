// Masked targets (Note [Token flags], data/token_flags.h): instruction-style data whose flag
// shards mark which tokens are trained. The loader masks exactly the others; the loss is the
// token-weighted mean over the whole step's counted targets, so 2 ranks (DDP or ZeRO-3, with
// accumulation) give one process's weights, and the logged loss is the mean over counted targets
// that the model computes directly.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "braid/core/device_backend.h"
#include "braid/core/rng.h"
#include "braid/data/data_loader.h"
#include "braid/data/token_flags.h"
#include "braid/data/token_shard.h"
#include "testing/train/strategy_parity_util.h"

namespace braid::train {
namespace {

constexpr int64_t kT = 16, kRows = 64;

// Rows of kT + 1 random tokens; each begins an example, a second example begins somewhere in
// about half of them, and about half of each example's tokens after its first are trained.
// `all_trained`: every token but the examples' first is trained, and no second example begins.
std::string flagged_data(const std::string& name, bool all_trained, bool packed = false) {
  namespace fs = std::filesystem;
  const fs::path dir = private_temp_dir(name);
  if (fs::exists(dir / "meta.json")) return dir.string();
  fs::create_directories(dir);
  Rng rng(7);
  std::vector<int32_t> ids, flags;
  for (int64_t r = 0; r < kRows; ++r) {
    const int64_t second =
        !all_trained && rng.below(2) ? 2 + static_cast<int64_t>(rng.below(12)) : -1;
    for (int64_t t = 0; t <= kT; ++t) {
      ids.push_back(static_cast<int32_t>(rng.below(1024)));
      if (t == 0 || t == second)
        flags.push_back(data::kFlagSegmentStart);
      else
        flags.push_back(all_trained || rng.below(2) ? data::kFlagTarget : 0);
    }
  }
  for (const char* split : {"train", "val"}) {
    data::write_token_shard((dir / (std::string(split) + "_000000.bin")).string(), ids, 1024);
    data::write_token_shard((dir / (std::string(split) + "_000000.flags")).string(), flags,
                            data::kFlagValues, data::kTokenShardChunkBytes, data::TokenDType::u8);
  }
  std::ofstream(dir / "meta.json")
      << "{\"row_tokens\": " << kT + 1 << (packed ? ", \"instruct\": {\"layout\": \"pack\"}" : "")
      << "}\n";
  return dir.string();
}

config::TrainConfig masked_config(const std::string& data_dir, int64_t micro, int64_t accum,
                                  const std::string& strategy) {
  config::TrainConfig c = tiny(micro, accum, strategy);
  c.data.random_tokens = false;
  c.data.train = data_dir;
  c.training.max_steps = 3;
  return c;
}

// The loader over dir's train rows, as the trainer reads them but unshuffled.
data::DataLoaderOptions row_options(int64_t batch) {
  data::DataLoaderOptions o;
  o.batch_size = batch;
  o.seq_len = kT;
  o.stride = kT + 1;
  o.shuffle = false;
  return o;
}

// 2 ranks under DDP (micro 2 x accumulation 2), ZeRO-3 (micro 4) and tp 2 give `one`'s weights.
void expect_data_parallel_and_tp_match(const std::string& dir, const Tensor& one) {
  EXPECT_TRUE(weights_match(train_ranks(2, masked_config(dir, 2, 2, "ddp")), one));
  EXPECT_TRUE(weights_match(train_ranks(2, masked_config(dir, 4, 1, "zero3")), one));
  config::TrainConfig tp = masked_config(dir, 4, 2, "none");
  tp.parallel.tensor_parallel_size = 2;
  EXPECT_TRUE(weights_match(train_ranks(2, tp), one, 1e-4));
}

TEST(MaskedLoss, TheLoaderMasksExactlyWhatTheFlagsDoNotTrain) {
  const std::string dir = flagged_data("braid_masked_data", false);
  data::DataLoader loader(data::TokenDataset::find_shards(dir, "train"), row_options(4));
  ASSERT_TRUE(loader.masked());
  EXPECT_EQ(loader.num_samples(), kRows);  // one sample a row
  data::TokenShard tokens(dir + "/train_000000.bin"), flags(dir + "/train_000000.flags");
  const data::Batch b = loader.next();
  int64_t counted = 0;
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t t = 0; t < kT; ++t) {
      const int64_t at = r * (kT + 1) + t;
      EXPECT_EQ(b.inputs.data<int32_t>()[r * kT + t], tokens.at(at));
      const int32_t f = flags.at(at + 1);
      const bool trained = f == data::kFlagTarget;
      EXPECT_EQ(b.targets.data<int32_t>()[r * kT + t],
                trained ? tokens.at(at + 1) : data::kIgnoreTarget)
          << "row " << r << " position " << t;
      counted += trained;
    }
  }
  EXPECT_EQ(b.counted, counted);
  EXPECT_GT(counted, 0);
  EXPECT_LT(counted, 4 * kT);
}

TEST(MaskedLoss, TheLoggedLossIsTheMeanOverCountedTargets) {
  const std::string dir = flagged_data("braid_masked_data", false);
  config::TrainConfig c = masked_config(dir, 4, 1, "none");
  c.training.max_steps = 1;
  c.schedule.warmup_steps = 0;
  Trainer t(c, nullptr, quiet());
  // The step's batch, read as the trainer's loader reads it, and the model before the step.
  data::DataLoaderOptions o = row_options(4);
  o.shuffle = true;
  o.seed = c.training.seed;
  o.drop_last = true;
  o.vocab_size = t.model().config().vocab_size;
  data::DataLoader loader(data::TokenDataset::find_shards(dir, "train"), o);
  const data::Batch b = loader.next();
  double expected = 0;
  {
    autograd::NoGradGuard no_grad;
    expected = t.model().loss(b.inputs, b.targets).value().item();
  }
  const TrainResult r = t.run();
  EXPECT_NEAR(r.first_loss, expected, 1e-5 * expected);
}

TEST(MaskedLoss, TwoRanksGiveOneProcessWeightsUnderEveryParallelism) {
  const std::string dir = flagged_data("braid_masked_data", false);
  const Tensor one = train_ranks(1, masked_config(dir, 4, 2, "none"));
  expect_data_parallel_and_tp_match(dir, one);
  config::TrainConfig pp = masked_config(dir, 4, 2, "none");
  pp.parallel.pipeline_parallel_size = 2;
  EXPECT_TRUE(weights_match(train_ranks(2, pp), one));
  // Context parallelism: each rank holds half of every row's tokens and counts its share.
  for (const char* mode : {"ring", "ulysses"}) {
    config::TrainConfig cp = masked_config(dir, 4, 2, "none");
    cp.parallel.context_parallel_size = 2;
    cp.parallel.context_parallel_mode = mode;
    EXPECT_TRUE(weights_match(train_ranks(2, cp), one)) << mode;
  }
}

TEST(MaskedLoss, TheMasksChangeTheRun) {
  const std::string all = flagged_data("braid_masked_all", true);
  const std::string some = flagged_data("braid_masked_data", false);
  const Tensor a = train_ranks(1, masked_config(all, 4, 1, "none"));
  const Tensor s = train_ranks(1, masked_config(some, 4, 1, "none"));
  EXPECT_FALSE(braid::testing::bit_equal(a, s)) << "the masks changed nothing";
}

TEST(MaskedLoss, RowsOfAnotherLengthAreRefusedNamingBoth) {
  const std::string dir = flagged_data("braid_masked_data", false);
  config::TrainConfig c = masked_config(dir, 4, 1, "none");
  c.data.seq_len = 8;
  try {
    Trainer t(c, nullptr, quiet());
    ADD_FAILURE() << "not refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rows of 17 tokens"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("data.seq_len is 8"), std::string::npos) << e.what();
  }
}

// Note [Packed rows]: the same rows read as packed examples, each attending to itself only.
TEST(MaskedLoss, PackedRowsGiveOneProcessWeightsEvenInAPipeline) {
  const std::string dir = flagged_data("braid_masked_packed", false, true);
  data::DataLoaderOptions o = row_options(4);
  o.positions = true;
  data::DataLoader loader(data::TokenDataset::find_shards(dir, "train"), o);
  data::TokenShard flags(dir + "/train_000000.flags");
  const data::Batch b = loader.next();
  ASSERT_TRUE(b.positions.defined());
  for (int64_t r = 0; r < 4; ++r) {
    int32_t want = 0;
    for (int64_t t = 0; t < kT; ++t) {
      if (t > 0) want = flags.at(r * (kT + 1) + t) & data::kFlagSegmentStart ? 0 : want + 1;
      EXPECT_EQ(b.positions.data<int32_t>()[r * kT + t], want) << "row " << r << " at " << t;
    }
  }
  const Tensor one = train_ranks(1, masked_config(dir, 4, 2, "none"));
  const Tensor plain =
      train_ranks(1, masked_config(flagged_data("braid_masked_data", false), 4, 2, "none"));
  EXPECT_FALSE(braid::testing::bit_equal(one, plain)) << "packing changed nothing";
  expect_data_parallel_and_tp_match(dir, one);
  // A pipeline, with checkpointing (recomputed forwards must see their micro-batch's layout
  // after the 1F1B schedule has run later micro-batches' forwards).
  for (const char* ac : {"none", "full"}) {
    config::TrainConfig pp = masked_config(dir, 4, 4, "none");
    pp.training.micro_batch_size = 2;
    pp.parallel.pipeline_parallel_size = 2;
    pp.model.activation_checkpointing = ac;
    config::TrainConfig ref = masked_config(dir, 2, 4, "none");
    EXPECT_TRUE(weights_match(train_ranks(2, pp), train_ranks(1, ref))) << ac;
  }
  config::TrainConfig cp = masked_config(dir, 4, 2, "none");
  cp.parallel.context_parallel_size = 2;
  for (const std::string& e : construction_errors(2, cp))
    EXPECT_NE(e.find("packs several examples a row, which does not run with "
                     "parallel.context_parallel_size > 1 yet"),
              std::string::npos)
        << e;
}

// On a device (the simulated one, Note [Simulated device]): the layout's positions live there,
// and the run gives the CPU's weights bit for bit.
TEST(MaskedLoss, PackedRowsOnADeviceGiveTheCpuWeights) {
  if (!register_simulated_device()) GTEST_SKIP() << "a real CUDA backend is registered";
  struct Unregister {
    ~Unregister() { register_device_backend(DeviceType::cuda, nullptr); }
  } unregister;
  const std::string dir = flagged_data("braid_masked_packed", false, true);
  auto train_on = [&](const std::string& device) {
    config::TrainConfig c = masked_config(dir, 4, 2, "none");
    c.training.device = device;
    Trainer t(c, nullptr, quiet());
    t.run();
    return t.gather_parameters().to(Device::cpu()).to_f32_vector();
  };
  EXPECT_EQ(train_on("cuda"), train_on("cpu"));
}

TEST(MaskedLoss, FlagShardsMissingOrShortAreErrorsNamingTheFiles) {
  namespace fs = std::filesystem;
  const fs::path dir = private_temp_dir("braid_masked_bad");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::vector<int32_t> ids(40, 3), flags(40, data::kFlagTarget), short_flags(39, 0);
  auto shard = [&](const char* name) { return (dir / name).string(); };
  auto expect_error = [&](const std::vector<std::string>& shards, const std::string& want) {
    try {
      data::TokenDataset d(shards, kT + 1, kT + 1);
      ADD_FAILURE() << "no error, wanted " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  data::write_token_shard(shard("train_000000.bin"), ids, 1024);
  data::write_token_shard(shard("train_000001.bin"), ids, 1024);
  data::write_token_shard(shard("train_000000.flags"), flags, data::kFlagValues,
                          data::kTokenShardChunkBytes, data::TokenDType::u8);
  const std::vector<std::string> both = {shard("train_000000.bin"), shard("train_000001.bin")};
  expect_error(both, "train_000001.flags' does not");
  data::write_token_shard(shard("train_000001.flags"), short_flags, data::kFlagValues,
                          data::kTokenShardChunkBytes, data::TokenDType::u8);
  expect_error(both, "holds 39 values for the 40 tokens");
  EXPECT_THROW(data::write_token_shard(shard("x.flags"), flags, 300, data::kTokenShardChunkBytes,
                                       data::TokenDType::u8),
               Error);
}

}  // namespace
}  // namespace braid::train
