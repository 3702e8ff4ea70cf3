// Shared by the checkpoint tests (thread-backed ranks and real processes under mpirun): a tiny
// run on real token shards that saves training checkpoints, and checkpoint comparison.
//
// Note [Resume setting]: Note [Parity setting]'s 4 steps of 2 accumulated micro-steps with
// clipping and frozen parameters, reading prepared token shards (train and validation) through
// the real data loader, evaluating every 2 steps, and saving a checkpoint every 2 steps.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "braid/checkpoint/checkpoint_dir.h"
#include "braid/checkpoint/checkpoint_reader.h"
#include "braid/core/rng.h"
#include "braid/data/token_shard.h"
#include "testing/train/strategy_parity_util.h"

namespace braid::train {

// Prepared train and validation shards of random tokens under dir (made once per process).
inline std::string resume_data_dir() {
  namespace fs = std::filesystem;
  const fs::path dir = private_temp_dir("braid_resume_data");
  if (fs::exists(dir / "val_000000.bin")) return dir.string();
  fs::create_directories(dir);
  Rng rng(99);
  std::vector<int32_t> ids(40000);
  for (auto& id : ids) id = static_cast<int32_t>(rng.below(1024));
  data::write_token_shard((dir / "train_000000.bin.tmp").string(), ids, 1024);
  data::write_token_shard((dir / "val_000000.bin.tmp").string(), ids, 1024);
  fs::rename(dir / "train_000000.bin.tmp", dir / "train_000000.bin");
  fs::rename(dir / "val_000000.bin.tmp", dir / "val_000000.bin");
  return dir.string();
}

// Note [Resume setting]; checkpoints under checkpoint_dir.
inline config::TrainConfig resume_config(const std::string& checkpoint_dir) {
  config::TrainConfig c = parity_config("true");
  c.data.random_tokens = false;
  c.data.train = resume_data_dir();
  c.training.eval_interval = 2;
  c.training.eval_batches = 2;
  c.checkpoint.dir = checkpoint_dir;
  c.checkpoint.interval = 2;
  return c;
}

// Every tensor of two checkpoints (parameters and optimizer state), read whole: equal bits,
// and the same training counters. Layouts may differ.
inline ::testing::AssertionResult same_checkpoint_contents(const std::filesystem::path& a,
                                                           const std::filesystem::path& b) {
  checkpoint::CheckpointReader ra(a), rb(b);
  const auto& ma = ra.manifest();
  const auto& mb = rb.manifest();
  if (ma.step != mb.step || ma.counters != mb.counters)
    return ::testing::AssertionFailure()
           << "steps or counters differ: " << ma.step << " vs " << mb.step;
  if (ma.tensors.size() != mb.tensors.size())
    return ::testing::AssertionFailure()
           << ma.tensors.size() << " vs " << mb.tensors.size() << " tensors";
  for (const auto& t : ma.tensors) {
    Tensor x = Tensor::empty(Shape{t.shape.numel()}), y = Tensor::empty(Shape{t.shape.numel()});
    ra.read(t.kind, t.name, t.shape, TpSlice{}, 0, x);
    rb.read(t.kind, t.name, t.shape, TpSlice{}, 0, y);
    if (!braid::testing::bit_equal(x, y))
      return ::testing::AssertionFailure() << t.kind << " of '" << t.name << "' differs";
  }
  return ::testing::AssertionSuccess();
}

// Flips one bit of the byte at `at` in file.
inline void flip_bit(const std::filesystem::path& file, int64_t at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char ch = 0;
  f.read(&ch, 1);
  ch = static_cast<char>(ch ^ 0x10);
  f.seekp(at);
  f.write(&ch, 1);
}

// Makes dir look as if the run had died right after saving `step`: later step directories gone,
// `latest` naming it.
inline void roll_back_to(const std::filesystem::path& root, int64_t step) {
  namespace fs = std::filesystem;
  for (const auto& e : fs::directory_iterator(root))
    if (checkpoint::step_of(e.path().filename().string()) > step) fs::remove_all(e.path());
  std::ofstream(root / checkpoint::kLatestName) << checkpoint::step_dir_name(step) << "\n";
}

// Note [Resume setting] under `apply` on n thread ranks, checkpoints under root/run: 4 steps
// saving at 2 and 4; the directory rolled back to step 2 (as if the run had died right after
// that save) and the same config run again resumes at step 2 by itself; its weights and step-4
// checkpoint (weights and optimizer state) are the straight run's bits.
inline void expect_resume_bit_identical(int n, const std::filesystem::path& root,
                                        const std::function<void(config::TrainConfig&)>& apply) {
  namespace fs = std::filesystem;
  fs::remove_all(root);
  config::TrainConfig c = resume_config((root / "run").string());
  apply(c);
  const Tensor straight = train_ranks(n, c);
  fs::rename(root / "run" / checkpoint::step_dir_name(4), root / "straight-step-4");
  roll_back_to(root / "run", 2);
  std::vector<int64_t> started(static_cast<size_t>(n), -1);
  Tensor resumed;
  std::mutex mu;
  braid::testing::run_ranks(n, [&](comm::ProcessGroup& pg) {
    Trainer t(c, borrow(pg), quiet());
    Tensor w = train_and_gather(t);
    std::lock_guard<std::mutex> lock(mu);
    started[static_cast<size_t>(pg.rank())] = t.start_step();
    if (pg.rank() == 0) resumed = w;
  });
  for (int64_t s : started) EXPECT_EQ(s, 2);
  EXPECT_TRUE(braid::testing::bit_equal(resumed, straight));
  EXPECT_TRUE(same_checkpoint_contents(root / "run" / checkpoint::step_dir_name(4),
                                       root / "straight-step-4"));
}

}  // namespace braid::train
