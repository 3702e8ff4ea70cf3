// Checkpoints from a device (Note [Training device], Note [Checkpoints from a device]): a run on
// the simulated device writes its shards through host copies and resumes by reading them back
// onto the device. Resumed on the device it gives the uninterrupted device run's weights bit for
// bit; resumed on the CPU, the same; and its checkpoint is the CPU run's, tensor for tensor.
#include "testing/train/checkpoint_test_util.h"
#include "testing/train/device_ranks_util.h"

namespace braid::train {
namespace {

namespace fs = std::filesystem;

// c resumed from `from` on n thread ranks on `device`: rank 0's weights on the host; every rank
// starts at step 2.
Tensor resumed_on(int n, config::TrainConfig c, const fs::path& from, const std::string& device) {
  c.training.device = device;
  c.training.resume = from.string();
  c.checkpoint.dir = (from.parent_path().parent_path() / ("resumed_" + device)).string();
  Tensor out;
  std::mutex mu;
  braid::testing::run_ranks(n, [&](comm::ProcessGroup& pg) {
    Trainer t(c, borrow(pg), quiet());
    t.run();
    EXPECT_EQ(t.start_step(), 2) << "rank " << pg.rank();
    Tensor w = t.gather_parameters().to(Device::cpu());
    std::lock_guard<std::mutex> lock(mu);
    if (pg.rank() == 0) out = w;
  });
  return out;
}

// Note [Resume setting] under ZeRO-3 on 2 ranks (sharded parameters and optimizer state),
// checkpoints at steps 2 and 4.
TEST_F(DeviceRanks, CheckpointsSaveOnADeviceAndResumeOnItOrTheCpuBitForBit) {
  const fs::path dir = private_temp_dir("braid_device_checkpoint");
  fs::remove_all(dir);
  config::TrainConfig c = resume_config((dir / "device").string());
  c.parallel.strategy = "zero3";
  const Tensor straight = train_on(2, c, "cuda");
  const fs::path step2 = dir / "device" / checkpoint::step_dir_name(2);
  EXPECT_TRUE(braid::testing::bit_equal(resumed_on(2, c, step2, "cuda"), straight)) << "device";
  EXPECT_TRUE(braid::testing::bit_equal(resumed_on(2, c, step2, "cpu"), straight)) << "cpu";
  config::TrainConfig cpu = c;
  cpu.checkpoint.dir = (dir / "cpu").string();
  train_on(2, cpu, "cpu");
  EXPECT_TRUE(same_checkpoint_contents(dir / "device" / checkpoint::step_dir_name(4),
                                       dir / "cpu" / checkpoint::step_dir_name(4)));
}

// Note [Optimizer state on the host]: the state is saved from and resumed into host memory,
// the master weights into both copies.
TEST_F(DeviceRanks, CheckpointsWithTheStateOnTheHostResumeBitForBit) {
  const fs::path dir = private_temp_dir("braid_device_host_state_checkpoint");
  fs::remove_all(dir);
  config::TrainConfig c = resume_config((dir / "device").string());
  c.parallel.strategy = "zero2";
  c.parallel.offload_optimizer = "cpu";
  const Tensor straight = train_on(2, c, "cuda");
  const fs::path step2 = dir / "device" / checkpoint::step_dir_name(2);
  EXPECT_TRUE(braid::testing::bit_equal(resumed_on(2, c, step2, "cuda"), straight));
}

// Over the device group (Note [Device groups], as NCCL): the checkpoint's collectives on host
// tensors are staged onto the device; resumed over it, the uninterrupted run's weights.
TEST_F(DeviceGroupRanks, CheckpointsSaveAndResumeOverTheDeviceGroupBitForBit) {
  const fs::path dir = private_temp_dir("braid_device_group_checkpoint");
  fs::remove_all(dir);
  config::TrainConfig c = resume_config((dir / "device").string());
  c.parallel.strategy = "zero3";
  const int64_t made = braid::testing::simulated_device_groups_made();
  const Tensor straight = train_on(2, c, "cuda", /*staged=*/false);
  const fs::path step2 = dir / "device" / checkpoint::step_dir_name(2);
  EXPECT_TRUE(braid::testing::bit_equal(resumed_on(2, c, step2, "cuda"), straight));
  EXPECT_GE(braid::testing::simulated_device_groups_made() - made, 4);
}

}  // namespace
}  // namespace braid::train
