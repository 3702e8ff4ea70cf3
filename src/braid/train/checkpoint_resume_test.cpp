// Training checkpoints through the Trainer: resume is bit-identical to a run that never
// stopped, for every data-parallel strategy; a checkpoint loads under another layout with the
// same bits; a save that fails anywhere leaves the previous checkpoint loadable and nothing of
// itself. Damaged checkpoints: checkpoint_corruption_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "braid/checkpoint/file_io.h"
#include "braid/checkpoint/resume.h"
#include "braid/train/checkpoint_tools.h"
#include "testing/train/checkpoint_test_util.h"

namespace braid::train {
namespace {

namespace fs = std::filesystem;

struct ResumeCase {
  std::string name;
  int ranks;
  std::function<void(config::TrainConfig&)> apply;
};

void PrintTo(const ResumeCase& c, std::ostream* os) {
  *os << c.name;
}

std::vector<ResumeCase> resume_cases() {
  std::vector<ResumeCase> cases = {
      {"ddp", 2, [](config::TrainConfig& c) { c.parallel.strategy = "ddp"; }},
      {"none", 1, [](config::TrainConfig& c) { c.parallel.strategy = "none"; }}};
  for (const StrategyVariant& v : strategy_variants()) {
    if (v.name.find("fsdp_FULL") != std::string::npos ||
        v.name.find("activation") != std::string::npos)
      continue;  // the same as zero3 here
    cases.push_back({v.name, v.min_ranks > 1 ? 4 : 2, v.apply});
  }
  // Mixed precision: the compute copies come back from the masters; fp16's loss scaler state
  // (a scale that grows every step here) is part of the checkpoint.
  for (const char* strategy : {"zero1", "zero3"})
    cases.push_back({std::string(strategy) + "_bf16", 2, [strategy](config::TrainConfig& c) {
                       c.parallel.strategy = strategy;
                       c.training.precision = "bf16";
                     }});
  // Offloaded parameters in bf16: the compute copy kept in memory comes back from the loaded
  // masters (Note [Offloaded compute copy]).
  cases.push_back({"zero3_offload_bf16", 2, [](config::TrainConfig& c) {
                     c.parallel.strategy = "zero3";
                     c.training.precision = "bf16";
                     c.parallel.offload_optimizer = "nvme";
                     c.parallel.offload_params = "nvme";
                     c.parallel.offload_dir = private_offload_dir();
                   }});
  cases.push_back({"ddp_fp16_dynamic_scale", 2, [](config::TrainConfig& c) {
                     c.training.precision = "fp16";
                     c.fp16.initial_scale_power = 8;
                     c.fp16.loss_scale_window = 1;
                   }});
  // checkpoint.async: the same checkpoints, written in the background.
  for (const char* strategy : {"ddp", "zero3"})
    cases.push_back({std::string(strategy) + "_async", 2, [strategy](config::TrainConfig& c) {
                       c.parallel.strategy = strategy;
                       c.checkpoint.async = true;
                     }});
  return cases;
}

class Resume : public ::testing::TestWithParam<ResumeCase> {};

// Note [Resume setting]: stopped after its step-2 checkpoint and run again, the run resumes by
// itself and ends with the straight run's bits (expect_resume_bit_identical).
TEST_P(Resume, StoppedAndResumedRunEqualsTheStraightRunBitForBit) {
  const ResumeCase& rc = GetParam();
  expect_resume_bit_identical(rc.ranks, private_temp_dir("braid_resume_" + rc.name), rc.apply);
}

INSTANTIATE_TEST_SUITE_P(Strategies, Resume, ::testing::ValuesIn(resume_cases()),
                         [](const auto& info) { return info.param.name; });

// Note [Verified reads]: under zero3 a resuming rank reads its own shards (and the files'
// headers and tables), not every unit whole; under zero1/2 its own piece of each unit, under
// ddp the parameters and state it saved, the rest gathered or sent (Note [Ranged loads]):
// about its own file each.
class CheckpointLoadShare : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointLoadShare, ARankReadsAboutItsShareNotEverything) {
  const fs::path root = private_temp_dir("braid_load_share_" + GetParam());
  fs::remove_all(root);
  config::TrainConfig c = resume_config((root / "run").string());
  c.parallel.strategy = GetParam();
  c.training.max_steps = 2;
  TrainerOptions o = quiet();
  o.checkpoint_block_bytes = 4096;  // the tiny model's files are far smaller than 4 MiB
  train_ranks(2, c, o);
  const fs::path step = root / "run" / checkpoint::step_dir_name(2);
  const int64_t total = checkpoint::CheckpointReader(step).manifest().total_bytes();
  c.training.resume = step.string();
  std::vector<int64_t> read(2, 0);
  braid::testing::run_ranks(2, [&](comm::ProcessGroup& pg) {
    const Trainer t(c, borrow(pg), o);
    read[static_cast<size_t>(pg.rank())] = t.checkpoint_bytes_read();
  });
  // Each rank reads about its own file (the files' headers and tables, and the blocks at the
  // ends of its ranges, beside it), and together they read the checkpoint about once.
  for (int r = 0; r < 2; ++r) {
    const double own = static_cast<double>(fs::file_size(step / checkpoint::rank_file_name(r)));
    const double got = static_cast<double>(read[static_cast<size_t>(r)]);
    EXPECT_GT(got, 0.8 * own) << "rank " << r << ": " << got << " of its file's " << own;
    EXPECT_LT(got, 1.25 * own) << "rank " << r << ": " << got << " of its file's " << own;
  }
  EXPECT_LT(read[0] + read[1], total * 12 / 10) << read[0] << " + " << read[1] << " of " << total;
  // Note [One writer per range]: the replicas' files hold about half each (largest first; in name
  // order the embedding, named last, made one file twice the other).
  const auto f0 = static_cast<double>(fs::file_size(step / checkpoint::rank_file_name(0)));
  const auto f1 = static_cast<double>(fs::file_size(step / checkpoint::rank_file_name(1)));
  EXPECT_LT(std::max(f0, f1), 1.1 * std::min(f0, f1)) << f0 << " and " << f1 << " bytes";
  fs::remove_all(root);
}

INSTANTIATE_TEST_SUITE_P(Strategies, CheckpointLoadShare,
                         ::testing::Values("ddp", "zero1", "zero2", "zero3"),
                         [](const auto& info) { return info.param; });

// Note [Piece order] (checkpoint/manifest.h): with the optimizer state in memory each rank file
// holds its masters, then every exp_avg, then every exp_avg_sq, as a load reads them; with the
// state offloaded to files, slice by slice (a master, then its states), as one visit reads them.
TEST(CheckpointPieceOrder, KindByKindInMemorySliceBySliceOffloaded) {
  const fs::path root = private_temp_dir("braid_piece_order");
  for (const bool offload : {false, true}) {
    fs::remove_all(root);
    config::TrainConfig c = resume_config((root / "run").string());
    c.parallel.strategy = "zero3";
    c.training.max_steps = 2;
    if (offload) {
      c.parallel.offload_optimizer = "nvme";
      c.parallel.offload_dir = private_offload_dir();
    }
    train_ranks(2, c, quiet());
    const checkpoint::Manifest m =
        checkpoint::CheckpointReader(root / "run" / checkpoint::step_dir_name(2)).manifest();
    const std::vector<std::string> kinds = {"param", "exp_avg", "exp_avg_sq"};
    for (int file = 0; file < 2; ++file) {
      std::vector<std::pair<int64_t, size_t>> order;  // (byte offset, kind) of its pieces
      for (const checkpoint::TensorEntry& t : m.tensors)
        for (const checkpoint::PieceEntry& p : t.pieces)
          if (p.file == file)
            order.emplace_back(
                p.byte_offset,
                static_cast<size_t>(std::find(kinds.begin(), kinds.end(), t.kind) - kinds.begin()));
      std::sort(order.begin(), order.end());
      ASSERT_EQ(order.size() % 3, 0u);
      for (size_t i = 0; i < order.size(); ++i) {
        const size_t want = offload ? i % 3 : i * 3 / order.size();
        ASSERT_EQ(order[i].second, want) << (offload ? "offloaded" : "in memory") << ", file "
                                         << file << ", piece " << i << " of " << order.size();
      }
    }
  }
  fs::remove_all(root);
}

// A version 3 checkpoint (one CRC-32C per file, verified whole before loading) still loads: the
// run resumed from it ends with the straight run's bits, and saves version 4.
TEST(CheckpointLoad, AVersion3CheckpointStillLoads) {
  const fs::path root = private_temp_dir("braid_load_v3");
  fs::remove_all(root);
  config::TrainConfig c = resume_config((root / "run").string());
  c.parallel.strategy = "zero1";
  TrainerOptions v3 = quiet();
  v3.checkpoint_version = 3;
  const Tensor straight = train_ranks(2, c, v3);
  const fs::path step2 = root / "run" / checkpoint::step_dir_name(2);
  EXPECT_EQ(checkpoint::CheckpointReader(step2).manifest().version, 3);
  EXPECT_FALSE(checkpoint::CheckpointReader(step2).checks_while_reading());
  EXPECT_NE(verify_checkpoint(step2).find("ok: "), std::string::npos);
  roll_back_to(root / "run", 2);
  const Tensor resumed = train_ranks(2, c);
  EXPECT_TRUE(braid::testing::bit_equal(resumed, straight));
  EXPECT_EQ(
      checkpoint::CheckpointReader(root / "run" / checkpoint::step_dir_name(4)).manifest().version,
      checkpoint::kManifestVersion);
  fs::remove_all(root);
}

// Saved by zero3 on 2 ranks at step 2, loaded by other layouts: saving again at once gives the
// same bits (weights and optimizer state), and training goes on. At 2 ranks any strategy ends
// where the 2-rank zero3 run ends, bit for bit (DDP = ZeRO); at 1 and 4 ranks to fp32 tolerance.
TEST(Reshard, ACheckpointLoadsUnderAnyLayoutWithTheSameBits) {
  const fs::path root = private_temp_dir("braid_reshard");
  fs::remove_all(root);
  config::TrainConfig base = resume_config((root / "zero3x2").string());
  base.training.global_batch_size = 4;
  base.training.micro_batch_size = 1;
  base.training.gradient_accumulation_steps = 0;  // derived per world size
  base.parallel.strategy = "zero3";
  const Tensor reference = train_ranks(2, base);
  const fs::path saved = root / "zero3x2" / checkpoint::step_dir_name(2);

  struct Layout {
    const char* name;
    int ranks;
    const char* strategy;
  };
  for (Layout l :
       {Layout{"ddp_x1", 1, "none"}, Layout{"ddp_x2", 2, "ddp"}, Layout{"zero1_x2", 2, "zero1"},
        Layout{"zero1_x4", 4, "zero1"}, Layout{"zero3_x4", 4, "zero3"}}) {
    SCOPED_TRACE(l.name);
    config::TrainConfig c = base;
    c.parallel.strategy = l.strategy;
    c.training.resume = saved.string();
    c.checkpoint.dir = (root / l.name).string();
    std::vector<Tensor> out(static_cast<size_t>(l.ranks));
    std::mutex mu;
    braid::testing::run_ranks(l.ranks, [&](comm::ProcessGroup& pg) {
      Trainer t(c, borrow(pg), quiet());
      EXPECT_EQ(t.start_step(), 2);
      t.save_checkpoint(2);  // what was loaded, saved by this layout
      Tensor w = train_and_gather(t);
      std::lock_guard<std::mutex> lock(mu);
      out[static_cast<size_t>(pg.rank())] = w;
    });
    EXPECT_TRUE(same_checkpoint_contents(root / l.name / checkpoint::step_dir_name(2), saved));
    if (l.ranks == 2)
      EXPECT_TRUE(braid::testing::bit_equal(out[0], reference));
    else
      EXPECT_TRUE(weights_match(out[0], reference));
  }
}

// checkpoint.async writes the same checkpoints as a save that blocks, and says how long training
// waited for it.
TEST(AsyncSave, WritesTheSameCheckpointsAsABlockingSave) {
  const fs::path root = private_temp_dir("braid_ckpt_async");
  fs::remove_all(root);
  config::TrainConfig c = resume_config((root / "sync").string());
  c.parallel.strategy = "zero2";
  const Tensor sync = train_ranks(2, c);
  c.checkpoint.dir = (root / "async").string();
  c.checkpoint.async = true;
  std::vector<TrainResult> results(2);
  std::vector<Tensor> weights(2);
  braid::testing::run_ranks(2, [&](comm::ProcessGroup& pg) {
    Trainer t(c, borrow(pg), quiet());
    results[static_cast<size_t>(pg.rank())] = t.run();
    weights[static_cast<size_t>(pg.rank())] = t.gather_parameters();
  });
  EXPECT_TRUE(braid::testing::bit_equal(weights[0], sync));
  EXPECT_EQ(results[0].checkpoints_saved, 2);
  for (int64_t step : {2, 4})
    EXPECT_TRUE(same_checkpoint_contents(root / "async" / checkpoint::step_dir_name(step),
                                         root / "sync" / checkpoint::step_dir_name(step)));
  EXPECT_EQ(checkpoint::checkpoints_newest_first(root / "async").front().filename(),
            checkpoint::step_dir_name(4));
}

// A save that fails at any stage on any rank fails every rank with that error, blocking or
// async (whose write fails on its thread and is reported at the next step); the previous
// checkpoint and `latest` are untouched and still load, and nothing of the failed save is left.
TEST(CheckpointFaults, AFailedSaveLeavesThePreviousCheckpointLoadable) {
  for (bool async : {false, true})
    for (const char* stage : {"create", "write", "sync", "manifest", "rename", "publish"}) {
      for (int failing : {0, 1}) {
        SCOPED_TRACE(std::string(stage) + " on rank " + std::to_string(failing) +
                     (async ? ", async" : ""));
        const fs::path root = private_temp_dir("braid_ckpt_fault");
        fs::remove_all(root);
        config::TrainConfig c = resume_config((root / "run").string());
        c.parallel.strategy = "zero2";
        c.checkpoint.async = async;
        auto errors = braid::testing::run_ranks_collect(2, [&](comm::ProcessGroup& pg) {
          TrainerOptions o = quiet();
          const int rank = pg.rank();
          int seen = 0;  // the second save (step 4) fails; step 2's succeeds
          o.fault = [&, rank](int64_t, const std::string& s) {
            if (s == std::string("save:") + stage && rank == failing && ++seen == 2)
              BRAID_THROW("injected: disk full");
          };
          Trainer t(c, borrow(pg), o);
          t.run();
        });
        const bool rank0_stage = std::string(stage) != "write" && std::string(stage) != "sync";
        if (rank0_stage && failing == 1) {  // rank 1 never reaches those stages: the save succeeds
          for (auto& e : errors) EXPECT_EQ(braid::testing::what(e), "");
          continue;
        }
        for (auto& e : errors) {
          EXPECT_NE(braid::testing::what(e).find("injected: disk full"), std::string::npos)
              << braid::testing::what(e);
        }
        const fs::path run = root / "run";
        if (std::string(stage) != "publish") {
          EXPECT_FALSE(fs::exists(run / checkpoint::step_dir_name(4)));
        }
        for (const auto& e : fs::directory_iterator(run))  // nothing of the failed save is left
          EXPECT_NE(e.path().filename().string().rfind(".tmp-", 0), 0u) << e.path();
        const auto found = checkpoint::checkpoints_newest_first(run);
        ASSERT_FALSE(found.empty());
        const std::string latest = checkpoint::checkpoints_newest_first(run).front().filename();
        EXPECT_EQ(latest, checkpoint::step_dir_name(2));
        checkpoint::CheckpointReader reader(run / checkpoint::step_dir_name(2));
        reader.verify(nullptr);
      }
    }
}

// `braid checkpoint export` of a zero3 run's last checkpoint writes the same model.safetensors
// as the run's own HF export; inspect and verify read it without starting a run.
TEST(CheckpointTools, ExportOfTheLastCheckpointIsTheRunsOwnExport) {
  const fs::path root = private_temp_dir("braid_ckpt_tools");
  fs::remove_all(root);
  config::TrainConfig c = resume_config((root / "run").string());
  c.parallel.strategy = "zero3";
  c.output.export_model = true;
  c.output.dir = (root / "out").string();
  train_ranks(2, c);
  const std::string line = export_checkpoint(root / "run", root / "exported");
  EXPECT_NE(line.find("exported step 4"), std::string::npos) << line;
  EXPECT_EQ(checkpoint::read_small_file(root / "exported" / "model.safetensors"),
            checkpoint::read_small_file(root / "out" / "model" / "model.safetensors"));
  const std::string listing = inspect_checkpoint(root / "run");
  EXPECT_NE(listing.find("step 4"), std::string::npos) << listing;
  EXPECT_NE(listing.find("zero3"), std::string::npos) << listing;
  EXPECT_NE(listing.find("transformer.h.1.mlp.c_proj.weight"), std::string::npos) << listing;
  EXPECT_NE(verify_checkpoint(root / "run" / checkpoint::step_dir_name(2)).find("ok: "),
            std::string::npos);
  flip_bit(root / "run" / checkpoint::step_dir_name(2) / checkpoint::rank_file_name(1), 4200);
  EXPECT_THROW(verify_checkpoint(root / "run" / checkpoint::step_dir_name(2)), Error);
}

// The manifest carries the model as trained: export needs no config file (here deleted after
// the run), and resuming as another model (an epsilon changed: no shape differs) is refused
// naming the field.
TEST(CheckpointTools, TheCheckpointCarriesTheModelItWasTrainedAs) {
  const fs::path root = private_temp_dir("braid_ckpt_model");
  fs::remove_all(root);
  fs::create_directories(root);
  config::TrainConfig c = resume_config((root / "run").string());
  nn::ModelConfig mc = model_config_from(c);
  mc.save_hf_file(root / "model.json");
  c.model.config = (root / "model.json").string();
  c.output.export_model = true;
  c.output.dir = (root / "out").string();
  train_ranks(2, c);
  fs::remove(root / "model.json");
  export_checkpoint(root / "run", root / "exported");
  EXPECT_EQ(checkpoint::read_small_file(root / "exported" / "model.safetensors"),
            checkpoint::read_small_file(root / "out" / "model" / "model.safetensors"));
  mc.norm_eps = 1e-6;
  mc.save_hf_file(root / "model.json");
  c.training.max_steps = 6;
  const auto errors = braid::testing::run_ranks_collect(
      2, [&](comm::ProcessGroup& pg) { Trainer t(c, borrow(pg), quiet()); });
  for (const auto& e : errors) {
    const std::string what = braid::testing::what(e);
    EXPECT_NE(what.find("was trained as another model: \"layer_norm_epsilon\": 1e-05 there, "
                        "\"layer_norm_epsilon\": 1e-06 in this run's model"),
              std::string::npos)
        << what;
  }
}

}  // namespace
}  // namespace braid::train
