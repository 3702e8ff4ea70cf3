// Bad input reaching the trainer ends in one clear error on every rank, naming what and where.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>

#include "braid/data/token_shard.h"
#include "testing/train/strategy_parity_util.h"

namespace braid::train {
namespace {

namespace fs = std::filesystem;

// A prepared-data directory with `train_tokens` tokens; every sample holds `last_id`.
fs::path make_data(const std::string& name, int64_t train_tokens, int32_t last_id = 5,
                   int64_t vocab = 1024) {
  fs::path dir = private_temp_dir("braid_trainer_errors_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<int32_t> ids(static_cast<size_t>(train_tokens));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i % 50);
  for (size_t i = 5; i < ids.size(); i += 16) ids[i] = last_id;  // one in every sample
  data::write_token_shard((dir / "train_000000.bin").string(), ids, vocab);
  data::write_token_shard((dir / "val_000000.bin").string(), ids, vocab);
  return dir;
}

config::TrainConfig shard_config(const fs::path& dir, int64_t micro) {
  config::TrainConfig c = tiny(micro, 1, "ddp");
  c.data.random_tokens = false;
  c.data.train = dir.string();
  c.training.eval_batches = 0;
  return c;
}

TEST(TrainerErrors, WorldLargerThanTheSamplesIsAClearErrorOnEveryRank) {
  // 3 samples of 17 tokens (seq_len 16), 4 ranks.
  fs::path dir = make_data("world", 3 * 16 + 1);
  config::TrainConfig c = shard_config(dir, 1);
  std::vector<std::string> errors = construction_errors(4, c);
  for (size_t r = 0; r < errors.size(); ++r) {
    const std::string& msg = errors[r];
    ASSERT_FALSE(msg.empty()) << "rank " << r << " did not fail";
    EXPECT_NE(msg.find("world size 4 > 3"), std::string::npos) << msg;
  }
}

TEST(TrainerErrors, TooFewSamplesForTheMicroBatch) {
  fs::path dir = make_data("micro", 4 * 16 + 1);
  config::TrainConfig c = shard_config(dir, 4);
  std::vector<std::string> errors = construction_errors(2, c);
  for (size_t r = 0; r < errors.size(); ++r) {
    const std::string& msg = errors[r];
    std::string want = "rank " + std::to_string(r) + " of 2 gets 2 samples per epoch";
    EXPECT_NE(msg.find(want), std::string::npos) << msg;
    EXPECT_NE(msg.find("fewer than one batch of 4"), std::string::npos) << msg;
  }
}

TEST(TrainerErrors, TokenIdOutOfTheModelsVocabularyNamesFileAndOffset) {
  // Shards from a 4096-token tokenizer, one id of which gpt2-tiny (1024 ids) cannot embed.
  fs::path dir = make_data("vocab", 64 * 16 + 1, 3000, 4096);
  config::TrainConfig ok = shard_config(dir, 1);
  ok.parallel.strategy = "none";
  try {
    Trainer t(ok, nullptr, quiet());
    t.run();
    FAIL() << "expected an out-of-range token error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("train_000000.bin"), std::string::npos) << msg;
  }
}

TEST(TrainerErrors, StrategyNoneOnSeveralRanksIsRefused) {
  config::TrainConfig c = tiny(1, 1, "none");
  for (const std::string& msg : construction_errors(2, c))
    EXPECT_NE(msg.find("parallel.strategy is 'none' but 2 ranks"), std::string::npos) << msg;
}

TEST(TrainerErrors, ShardingFactorThatDoesNotDivideTheRanksIsRefusedOnEveryRank) {
  config::TrainConfig c = tiny(1, 1, "fsdp");
  c.parallel.sharding_strategy = "HYBRID_SHARD";
  c.parallel.sharding_factor = 2;
  for (const std::string& msg : construction_errors(3, c))
    EXPECT_NE(msg.find("parallel.sharding_factor 2 does not divide the data-parallel size 3"),
              std::string::npos)
        << msg;
  c.parallel.sharding_strategy = "FULL_SHARD";  // a factor below the ranks needs hybrid
  c.parallel.sharding_factor = 1;
  for (const std::string& msg : construction_errors(2, c))
    EXPECT_NE(msg.find("needs a hybrid sharding strategy"), std::string::npos) << msg;
  c.parallel.strategy = "zero2";
  c.parallel.sharding_factor = 1;
  for (const std::string& msg : construction_errors(2, c))
    EXPECT_NE(msg.find("applies to sharded parameters"), std::string::npos) << msg;
}

TEST(TrainerErrors, ABudgetTooSmallForAnyStrategyStopsEveryRankAtStartWithTheBreakdown) {
  config::TrainConfig c = tiny(1, 1, "zero3");
  c.memory.budget = "200KiB";
  for (const std::string& msg : construction_errors(2, c)) {
    EXPECT_NE(msg.find("out of memory on cpu (rank "), std::string::npos) << msg;
    EXPECT_NE(msg.find("past the budget of 200.0 KiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("zero3 "), std::string::npos) << msg;
    EXPECT_NE(msg.find("Not even zero3 fits"), std::string::npos) << msg;
  }
}

TEST(TrainerErrors, ABudgetDdpExceedsStopsDdpButZero3Trains) {
  // 1.3M parameters on 2 ranks: DDP keeps 16 bytes per parameter (21 MiB), zero3 about 15 MiB.
  config::TrainConfig c = tiny(1, 1, "ddp");
  c.model.preset = "";
  c.model.config = six_block_model_config();
  c.memory.budget = "18MiB";
  for (const std::string& msg : construction_errors(2, c)) {
    EXPECT_NE(msg.find("past the budget of 18.0 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("parameters "), std::string::npos) << msg;
    EXPECT_NE(msg.find("What would help"), std::string::npos) << msg;
  }
  c.parallel.strategy = "zero3";
  braid::testing::run_ranks(2, [&](comm::ProcessGroup& pg) {
    Trainer t(c, borrow(pg), quiet());
    EXPECT_EQ(t.run().steps, c.training.max_steps);
    EXPECT_LE(t.memory()->total_peak(), 18 << 20);
  });
}

// Note [Output paths checked at start]: a path no rank can write stops every rank before the
// first step, naming the key, the path and the part that fails.
TEST(TrainerErrors, OutputPathsThatCannotBeWrittenFailEveryRankAtStart) {
  const fs::path dir = private_temp_dir("braid_trainer_errors_outputs");
  fs::create_directories(dir);
  const std::string file = (dir / "a_file").string();
  std::ofstream(file) << "not a directory\n";
  const auto expect_on_every_rank = [](const config::TrainConfig& c, const std::string& want) {
    for (const std::string& msg : construction_errors(2, c))
      EXPECT_NE(msg.find(want), std::string::npos) << "want: " << want << "\n got: " << msg;
  };
  config::TrainConfig c = tiny(1, 1, "ddp");
  c.output.export_model = true;
  c.output.dir = file;
  expect_on_every_rank(c, "output.dir '" + file + "': cannot write the exported model to '" + file +
                              "/model': '" + file + "' is a file, not a directory");
  c.output.export_model = false;
  c.checkpoint.interval = 5;  // checkpoint.dir defaults to <output.dir>/checkpoints
  expect_on_every_rank(c, "output.dir '" + file + "': cannot write training checkpoints to '" +
                              file + "/checkpoints': '" + file + "' is a file, not a directory");
  c.output.dir = (dir / "out").string();
  c.checkpoint.dir = file + "/deeper/ckpt";
  expect_on_every_rank(c, "checkpoint.dir '" + file +
                              "/deeper/ckpt': cannot write training "
                              "checkpoints to '" +
                              file + "/deeper/ckpt': '" + file + "' is a file, not a directory");
  // A directory no one can create a file in, even root: /proc.
  c.checkpoint.dir = "/proc/braid_no_such_dir/ckpt";
  expect_on_every_rank(c,
                       "checkpoint.dir '/proc/braid_no_such_dir/ckpt': cannot write training "
                       "checkpoints to '/proc/braid_no_such_dir/ckpt': cannot create a file in "
                       "'/proc': ");
  c.checkpoint.dir = "";
  c.checkpoint.interval = 0;
  c.parallel.strategy = "zero2";
  c.parallel.offload_optimizer = "nvme";
  c.parallel.offload_dir = file + "/offload";
  expect_on_every_rank(c, "parallel.offload_dir '" + file +
                              "/offload': cannot write offload files "
                              "to '" +
                              file + "/offload': '" + file + "' is a file, not a directory");
  c.parallel.strategy = "ddp";
  c.parallel.offload_optimizer = "none";
  c.parallel.offload_dir = "";
  // The samples' tokenizer, read only at the end, is named at the start.
  c.output.samples = 2;
  c.data.tokenizer = (dir / "no_tokenizer").string();
  expect_on_every_rank(c, "data.tokenizer (for output.samples): ");
  expect_on_every_rank(c, "no_tokenizer");
  c.output.samples = 0;
  c.data.tokenizer = "";
  c.parallel.pipeline_parallel_size = 2;
  c.training.gradient_accumulation_steps = 2;
  c.parallel.pipeline_trace = file + "/trace.json";
  expect_on_every_rank(c, "parallel.pipeline_trace '" + file +
                              "/trace.json': cannot write the "
                              "pipeline trace to '" +
                              file + "': '" + file + "' is a file, not a directory");
  // Writable paths, which do not exist yet: nothing is created before the run writes.
  c.parallel.pipeline_trace = (dir / "new/trace.json").string();
  c.output.export_model = true;
  c.checkpoint.interval = 5;
  for (const std::string& msg : construction_errors(2, c)) EXPECT_EQ(msg, "");
  EXPECT_FALSE(fs::exists(dir / "out"));
  EXPECT_FALSE(fs::exists(dir / "new"));
}

// Builds a Trainer on each of 2 thread-backed ranks, rank r's config from make(r).
std::vector<std::string> per_rank_errors(const std::function<config::TrainConfig(int)>& make) {
  auto errors = braid::testing::run_ranks_collect(
      2, [&](comm::ProcessGroup& pg) { Trainer t(make(pg.rank()), borrow(pg), quiet()); });
  std::vector<std::string> out;
  for (auto& e : errors) out.push_back(braid::testing::what(e));
  return out;
}

TEST(TrainerErrors, AnOutputPathOnlyOneRankCannotWriteFailsEveryRank) {
  const fs::path dir = private_temp_dir("braid_trainer_errors_one_rank");
  fs::create_directories(dir);
  const std::string file = (dir / "a_file").string();
  std::ofstream(file) << "not a directory\n";
  std::vector<std::string> errors = per_rank_errors([&](int rank) {
    config::TrainConfig c = tiny(2, 1, "ddp");
    c.output.export_model = true;
    c.output.dir = rank == 1 ? file : (dir / "out0").string();  // per node: may differ
    return c;
  });
  const std::string why =
      "output.dir '" + file + "': cannot write the exported model to '" + file + "/model'";
  EXPECT_NE(errors[0].find("rank(s) 1 of group"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find(why), std::string::npos) << errors[0];
  EXPECT_EQ(errors[1].find(why), 0u) << errors[1];
}

// A checkpoint past training.max_steps is an error naming both; one at it trains no step.
TEST(TrainerErrors, AResumeBeyondMaxStepsNamesTheCheckpointStepAndMaxSteps) {
  config::TrainConfig c = tiny(1, 1, "ddp");
  c.training.max_steps = 4;
  c.checkpoint.interval = 4;
  c.checkpoint.dir = private_temp_dir("braid_trainer_errors_resume").string();
  braid::testing::run_ranks(2, [&](comm::ProcessGroup& pg) {
    Trainer t(c, borrow(pg), quiet());
    t.run();
  });
  c.training.max_steps = 3;
  for (const std::string& msg : construction_errors(2, c)) {
    EXPECT_NE(msg.find("resume: checkpoint '" + c.checkpoint.dir), std::string::npos) << msg;
    EXPECT_NE(msg.find("' is at step 4, beyond training.max_steps = 3 (raise training.max_steps "
                       "to train on from it, or set training.resume: never to start over)"),
              std::string::npos)
        << msg;
  }
  c.training.max_steps = 4;
  TrainerOptions says = quiet();
  says.quiet = false;
  ::testing::internal::CaptureStdout();
  braid::testing::run_ranks(2, [&](comm::ProcessGroup& pg) {
    Trainer t(c, borrow(pg), says);
    EXPECT_EQ(t.start_step(), 4);
    const TrainResult r = t.run();
    EXPECT_EQ(r.steps, 0);
    EXPECT_EQ(r.resumed_from, 4);
  });
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("(step 4, "), std::string::npos) << out;
  EXPECT_NE(out.find("; nothing left to train: training.max_steps is 4"), std::string::npos) << out;
}

// Note [First-touch verification]: a flipped byte in a shard is found by the first read of its
// chunk, on every rank that reads it, naming the file and the chunk's bytes.
TEST(TrainerErrors, AFlippedByteInAShardFailsEveryRankNamingTheFileAndChunk) {
  fs::path dir = make_data("flip", 64 * 16 + 1);  // 1025 u16 tokens: one chunk, file bytes
                                                  // [64, 2114), its checksum at 2114
  const std::string shard = (dir / "train_000000.bin").string();
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64 + 100);  // token 50, 0 -> 1: still a valid id, so nothing else would notice
    f.put(1);
  }
  config::TrainConfig c = shard_config(dir, 1);
  auto errors = braid::testing::run_ranks_collect(2, [&](comm::ProcessGroup& pg) {
    Trainer t(c, borrow(pg), quiet());
    t.run();
  });
  for (auto& e : errors)
    EXPECT_EQ(braid::testing::what(e),
              "token shard '" + shard +
                  "': corrupt: chunk 0 (file bytes [64, 2114)) does not match its checksum at "
                  "offset 2114");
}

TEST(TrainerErrors, AModelConfigThatIsADirectoryIsNamed) {
  const fs::path dir = private_temp_dir("braid_trainer_errors_model_dir");
  fs::create_directories(dir);
  config::TrainConfig c = tiny(1, 1, "ddp");
  c.model.preset = "";
  c.model.config = dir.string();
  for (const std::string& msg : construction_errors(2, c))
    EXPECT_NE(
        msg.find("model.config '" + dir.string() + "' is a directory, not an HF config.json file"),
        std::string::npos)
        << msg;
  fs::copy_file(six_block_model_config(), dir / "config.json");
  for (const std::string& msg : construction_errors(2, c))
    EXPECT_NE(msg.find("' is a directory, not an HF config.json file (did you mean '" +
                       (dir / "config.json").string() + "'?)"),
              std::string::npos)
        << msg;
}

TEST(TrainerErrors, ConfigThatDiffersAcrossRanksNamesTheFieldsOnEveryRank) {
  std::vector<std::string> errors = per_rank_errors([](int rank) {
    config::TrainConfig c = tiny(2, 1, "ddp");
    if (rank == 1) c.optimizer.lr = 2e-3, c.training.seed = 7;
    return c;
  });
  for (int r = 0; r < 2; ++r) {
    const std::string& msg = errors[r];
    EXPECT_NE(msg.find("rank(s) 1 differ from rank 0 in training.seed, optimizer.lr"),
              std::string::npos)
        << msg;
    std::string mine = r == 0 ? "training.seed = 1337, optimizer.lr = 0.001"
                              : "training.seed = 7, optimizer.lr = 0.002";
    EXPECT_NE(msg.find("this rank (" + std::to_string(r) + ") has " + mine), std::string::npos)
        << msg;
  }
}

TEST(TrainerErrors, PerNodePathsMayDifferAcrossRanks) {
  std::vector<std::string> errors = per_rank_errors([](int rank) {
    config::TrainConfig c = tiny(2, 1, "ddp");
    c.output.dir = "out/node" + std::to_string(rank);
    c.data.tokenizer = "/mnt/node" + std::to_string(rank) + "/gpt2";
    return c;
  });
  for (const std::string& msg : errors) EXPECT_EQ(msg, "");
}

TEST(TrainerErrors, StrategyThatDiffersAcrossRanksIsNamedOnEveryRank) {
  std::vector<std::string> errors =
      per_rank_errors([](int rank) { return tiny(2, 1, rank == 0 ? "zero3" : "ddp"); });
  for (const std::string& msg : errors)
    EXPECT_NE(msg.find("rank(s) 1 differ from rank 0 in parallel.strategy"), std::string::npos)
        << msg;
}

}  // namespace
}  // namespace braid::train
