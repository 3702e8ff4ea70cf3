// braid train's device paths on a real GPU (label cuda; every test skips without one): one
// process, and a world of one thread rank over NCCL (Note [Device groups]: the trainer makes the
// NCCL group itself), strategy by strategy with offload, against the same run on the CPU. A GPU
// is not bit for bit the CPU (its GEMMs and reductions sum in other orders), so the weights after
// three steps must agree within fp32 rounding of those orders. Several GPUs would add ranks;
// the machines here have had one.
#include <gtest/gtest.h>

#include <string>

#include "braid/comm/device_group.h"
#include "braid/comm/local/local_group.h"
#include "braid/kernels/device.h"
#include "testing/tensor_compare.h"
#include "testing/train/strategy_parity_util.h"

namespace braid::train {
namespace {

class TrainerCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kernels::device_supported(DeviceType::cuda))
      GTEST_SKIP() << "no CUDA device is visible (no GPU, or CUDA_VISIBLE_DEVICES empty)";
  }
};

config::TrainConfig three_steps(const std::string& preset, const std::string& strategy) {
  config::TrainConfig c = tiny(2, 2, strategy);
  c.model.preset = preset;
  c.training.max_steps = 3;
  return c;
}

// c on one thread rank (a world of one: the runtime's group is NCCL on a GPU) or, with
// world false, one process without a world; the weights on the host.
Tensor train(config::TrainConfig c, const std::string& device, bool world,
             std::string* backend = nullptr) {
  c.training.device = device;
  std::shared_ptr<comm::ProcessGroup> w = world ? comm::LocalGroup::create(1)[0] : nullptr;
  Trainer t(c, w, quiet());
  if (backend) *backend = t.runtime_world() ? t.runtime_world()->backend() : "";
  t.run();
  return t.gather_parameters().to(Device::cpu());
}

TEST_F(TrainerCuda, OneProcessFollowsTheCpu) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    const config::TrainConfig c = three_steps(preset, "none");
    EXPECT_TRUE(
        braid::testing::all_close(train(c, "cuda", false), train(c, "cpu", false), 1e-3, 1e-5))
        << preset;
  }
}

TEST_F(TrainerCuda, StrategiesOverNcclFollowTheCpu) {
  ASSERT_EQ(comm::device_group_backend(DeviceType::cuda), "nccl");
  struct Case {
    const char* strategy;
    const char* offload;
  };
  for (const Case& k : {Case{"ddp", "none"}, Case{"zero2", "none"}, Case{"zero3", "none"},
                        Case{"zero2", "cpu"}, Case{"zero3", "nvme"}}) {
    const std::string name = std::string(k.strategy) + " offload " + k.offload;
    config::TrainConfig c = three_steps("gpt2-tiny", k.strategy);
    c.parallel.offload_optimizer = k.offload;
    if (std::string(k.offload) == "nvme") {
      c.parallel.offload_params = "nvme";
      c.parallel.offload_dir = private_offload_dir();
    }
    config::TrainConfig on_cpu = c;
    if (std::string(k.offload) == "cpu") on_cpu.parallel.offload_optimizer = "none";
    std::string backend;
    const Tensor gpu = train(c, "cuda", true, &backend);
    EXPECT_EQ(backend, "nccl") << name;
    EXPECT_TRUE(braid::testing::all_close(gpu, train(on_cpu, "cpu", true), 1e-3, 1e-5)) << name;
  }
}

}  // namespace
}  // namespace braid::train
