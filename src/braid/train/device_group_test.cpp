// Several ranks on a device over the device's own group (Note [Device groups]), as on GPUs with
// NCCL: the simulated device group (testing/simulated_device_group.h) takes only tensors on the
// rank's device and stages the host tensors it is given (the pipeline's headers, the
// vocabulary-parallel loss's statistics, the values ranks agree on) onto it (Note [Device
// staging]). Every strategy run over it gives the CPU run's weights bit for bit;
// parallel.comm_backend chooses it or the host groups.
#include "testing/train/context_parallel_parity_util.h"
#include "testing/train/device_ranks_util.h"
#include "testing/train/tensor_parallel_parity_util.h"

namespace braid::train {
namespace {

using braid::testing::bit_equal;
using braid::testing::simulated_device_group_ops;
using braid::testing::simulated_device_groups_made;

// Trains c on n thread ranks on the device and checks it ran over device groups: one world per
// rank made, and operations run on them.
Tensor over_device_groups(int n, const config::TrainConfig& c) {
  const int64_t made = simulated_device_groups_made();
  const int64_t ops = simulated_device_group_ops();
  Tensor w = train_on(n, c, "cuda", /*staged=*/false);  // the host world stages nothing
  EXPECT_GE(simulated_device_groups_made() - made, n);
  EXPECT_GT(simulated_device_group_ops(), ops);
  return w;
}

// Note [Parity setting]: accumulation, clipping and frozen parameters.
TEST_F(DeviceGroupRanks, DataParallelStrategiesGiveTheCpuWeightsBitForBit) {
  const config::TrainConfig base = parity_config("true");
  for (const char* precision : {"fp32", "bf16"}) {
    const config::TrainConfig c = with_strategy(base, "ddp", precision);
    EXPECT_TRUE(bit_equal(over_device_groups(2, c), train_on(2, c, "cpu"))) << "ddp " << precision;
  }
  const Tensor ddp = train_on(2, with_strategy(base, "ddp", "fp32"), "cpu");
  for (const char* strategy : {"zero1", "zero3"})
    EXPECT_TRUE(bit_equal(over_device_groups(2, with_strategy(base, strategy, "fp32")), ddp))
        << strategy;
  config::TrainConfig offload = with_strategy(base, "zero3", "fp32");  // Note [Offload on a device]
  offload.parallel.offload_optimizer = "nvme";
  offload.parallel.offload_params = "nvme";
  offload.parallel.offload_dir = private_offload_dir();
  EXPECT_TRUE(bit_equal(over_device_groups(2, offload), ddp)) << "zero3 offloaded";
  const Tensor ddp4 = train_on(4, with_strategy(base, "ddp", "fp32"), "cpu");
  EXPECT_TRUE(bit_equal(
      over_device_groups(4, with_strategy(base, "fsdp", "fp32", "HYBRID_SHARD", 2)), ddp4))
      << "HYBRID_SHARD";
}

// The pipeline's headers and losses, and the vocabulary-parallel loss's row statistics, are
// host tensors: the device group stages them.
TEST_F(DeviceGroupRanks, PipelineAndTensorParallelGiveTheCpuWeightsBitForBit) {
  for (const char* schedule : {"1f1b", "zb_v"}) {
    const config::TrainConfig c = pipeline(schedule);
    EXPECT_TRUE(bit_equal(over_device_groups(2, c), train_on(2, c, "cpu"))) << schedule;
  }
  const config::TrainConfig zero1 = pipeline("1f1b", "zero1");
  EXPECT_TRUE(bit_equal(over_device_groups(4, zero1), train_on(4, zero1, "cpu"))) << "zero1 x pp2";
  const config::TrainConfig tp = tp_parity_config("gpt2-tiny", 2, true, "none");
  EXPECT_TRUE(bit_equal(over_device_groups(2, tp), train_on(2, tp, "cpu"))) << "tp 2 sp";
}

// Ring attention's send/recv hops and Ulysses' all-to-alls take device tensors.
TEST_F(DeviceGroupRanks, ContextParallelGivesTheCpuWeightsBitForBit) {
  for (const char* mode : {"ring", "ulysses"}) {
    CpLayout l;
    l.world = 2;
    l.preset = "llama-tiny";
    l.mode = mode;
    const config::TrainConfig c = cp_parity_config(l);
    EXPECT_TRUE(bit_equal(over_device_groups(2, c), train_on(2, c, "cpu"))) << mode;
  }
}

TEST_F(DeviceGroupRanks, SamplesThroughAPipelineGiveTheCpuTokens) {
  const config::TrainConfig pp = pipeline("zb_v");
  const int64_t made = simulated_device_groups_made();
  EXPECT_EQ(samples_on(2, pp, "cuda"), samples_on(2, pp, "cpu"));
  EXPECT_GE(simulated_device_groups_made() - made, 2);
}

// host keeps the host groups (which then stage the device tensors); nccl is refused where the
// device group is another, naming the key.
TEST_F(DeviceGroupRanks, CommBackendChoosesTheGroup) {
  config::TrainConfig c = with_strategy(parity_config("true"), "ddp", "fp32");
  c.parallel.comm_backend = "host";
  const int64_t made = simulated_device_groups_made();
  EXPECT_TRUE(bit_equal(train_on(2, c, "cuda", /*staged=*/true), train_on(2, c, "cpu")));
  EXPECT_EQ(simulated_device_groups_made(), made);
  c.parallel.comm_backend = "nccl";
  c.training.device = "cuda";
  for (const std::string& e : construction_errors(2, c)) {
    EXPECT_NE(e.find("parallel.comm_backend: nccl"), std::string::npos) << e;
    EXPECT_NE(e.find("simulated"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace braid::train
