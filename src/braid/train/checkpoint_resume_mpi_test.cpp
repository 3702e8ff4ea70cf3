// Bit-identical resume as real processes under mpirun (Note [Resume setting],
// checkpoint_test_util.h): a run stopped after its step-2 checkpoint and started again ends
// with the straight run's weights and step-4 checkpoint, for DDP and the ZeRO stages (and
// hybrid sharding at 4 ranks), tensor and pipeline parallelism (and both at 4 ranks); every rank
// reads and writes one shared checkpoint directory.
#include <gtest/gtest.h>

#include "braid/comm/gather_strings.h"
#include "testing/tensor_compare.h"
#include "testing/train/checkpoint_test_util.h"
#include "testing/train/mpi_test_world.h"

namespace braid::train {
namespace {

namespace fs = std::filesystem;

Tensor train(const config::TrainConfig& cfg) {
  Trainer t(cfg, mpi_test_world(), quiet());
  return train_and_gather(t);
}

// Rank 0's temporary directory, the same path on every rank.
fs::path shared_dir(const std::string& name) {
  const std::string mine = private_temp_dir(name).string();
  return comm::all_gather_strings(mpi_test_world().get(), mine)[0];
}

void on_rank0_then_barrier(const std::function<void()>& fn) {
  if (mpi_test_world()->rank() == 0) fn();
  mpi_test_world()->barrier()->wait();
}

TEST(ResumeMpi, StoppedAndResumedRunEqualsTheStraightRunBitForBit) {
  const int n = mpi_test_world()->size();
  std::vector<StrategyVariant> variants = {
      {"ddp", 1, 1, [](config::TrainConfig& c) { c.parallel.strategy = "ddp"; }}};
  for (const StrategyVariant& v : strategy_variants())
    if ((v.name == "zero1" || v.name == "zero2" || v.name == "zero3" ||
         v.name.find("HYBRID") != std::string::npos) &&
        n >= v.min_ranks && n % v.rank_divisor == 0)
      variants.push_back(v);
  // Tensor- and pipeline-parallel checkpoints (Note [Placements]), and their mix with sharding.
  auto model_parallel = [](const char* strategy, int tp, int pp) {
    return [=](config::TrainConfig& c) {
      c.parallel.strategy = strategy;
      c.parallel.tensor_parallel_size = tp;
      c.parallel.pipeline_parallel_size = pp;
      c.parallel.sync_each_batch = "false";
    };
  };
  if (n % 2 == 0) {
    variants.push_back({"tp2", 2, 2, model_parallel(n == 2 ? "none" : "zero1", 2, 1)});
    variants.push_back({"pp2", 2, 2, model_parallel(n == 2 ? "none" : "zero3", 1, 2)});
  }
  if (n % 4 == 0)
    variants.push_back({"pp2_tp2", 4, 4, model_parallel(n == 4 ? "none" : "zero2", 2, 2)});
  for (const StrategyVariant& v : variants) {
    SCOPED_TRACE(v.name);
    const fs::path root = shared_dir("braid_resume_mpi_" + v.name);
    on_rank0_then_barrier([&] { fs::remove_all(root); });
    config::TrainConfig c = resume_config((root / "run").string());
    v.apply(c);
    const Tensor straight = train(c);
    on_rank0_then_barrier([&] {
      fs::rename(root / "run" / checkpoint::step_dir_name(4), root / "straight-step-4");
      roll_back_to(root / "run", 2);
    });
    Trainer t(c, mpi_test_world(), quiet());
    EXPECT_EQ(t.start_step(), 2);
    const Tensor resumed = train_and_gather(t);
    EXPECT_TRUE(braid::testing::bit_equal(resumed, straight))
        << "rank " << mpi_test_world()->rank();
    if (mpi_test_world()->rank() == 0) {
      EXPECT_TRUE(same_checkpoint_contents(root / "run" / checkpoint::step_dir_name(4),
                                           root / "straight-step-4"));
    }
    mpi_test_world()->barrier()->wait();
  }
}

}  // namespace
}  // namespace braid::train

int main(int argc, char** argv) {
  return braid::train::mpi_test_main(argc, argv);
}
