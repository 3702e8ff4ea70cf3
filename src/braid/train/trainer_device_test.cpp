// training.device (Note [Training device]) on the simulated device (Note [Simulated device]):
// the trainer's whole path (model, optimizer state, batches, steps, evaluation, export) with
// device tensors, where any host access outside a kernel would throw, gives the CPU run's
// weights bit for bit, and samples from it the CPU run's tokens; what is not supported on a
// device yet is refused at start.
#include <gtest/gtest.h>

#include "braid/core/device_backend.h"
#include "braid/train/generate.h"
#include "testing/simulated_device.h"
#include "testing/train/ddp_parity_util.h"

namespace braid::train {
namespace {

using TrainerDevice = braid::testing::SimulatedDeviceTest;

Tensor train_on(config::TrainConfig c, const std::string& device) {
  c.training.device = device;
  Trainer trainer(c, nullptr, quiet());
  trainer.run();
  return trainer.gather_parameters().to(Device::cpu());
}

TEST_F(TrainerDevice, StepsGiveTheCpuWeightsBitForBit) {
  for (const char* precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    config::TrainConfig c = tiny(2, 2, "none");
    c.training.precision = precision;
    c.training.max_steps = 4;
    const Tensor cpu = train_on(c, "cpu");
    const Tensor dev = train_on(c, "cuda");
    EXPECT_EQ(dev.to_f32_vector(), cpu.to_f32_vector());
  }
}

// Trained 2 steps, then 8 tokens sampled from the model (temperature and top-k, and greedy):
// the same tokens from the device as from the CPU.
TEST_F(TrainerDevice, SamplesGiveTheCpuTokens) {
  for (float temperature : {0.8f, 0.0f}) {
    std::vector<std::vector<int32_t>> tokens;
    for (const char* device : {"cpu", "cuda"}) {
      config::TrainConfig c = tiny(2, 2, "none");
      c.training.max_steps = 2;
      c.training.device = device;
      Trainer t(c, nullptr, quiet());
      t.run();
      SampleOptions so;
      so.max_new_tokens = 8;
      so.temperature = temperature;
      so.top_k = 20;
      Rng rng(7);
      const nn::ModelConfig& m = t.model().config();
      tokens.push_back(sample([&t](const Tensor& ids) { return t.last_logits(ids); }, m.max_seq_len,
                              m.vocab_size, {1, 2, 3}, so, rng));
    }
    EXPECT_EQ(tokens[0].size(), 11u);
    EXPECT_EQ(tokens[1], tokens[0]) << "temperature " << temperature;
  }
}

// parallel.comm_backend nccl where no NCCL group is built in (here: none registered), and a
// device braid does not know, are refused naming the key.
TEST_F(TrainerDevice, RefusesBadDeviceSettingsNamingTheKey) {
  config::TrainConfig c = tiny(2, 1, "none");
  c.training.device = "cuda";
  c.parallel.comm_backend = "nccl";
  try {
    Trainer trainer(c, nullptr, quiet());
    ADD_FAILURE() << "parallel.comm_backend nccl accepted without NCCL";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.comm_backend: nccl"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("built without NCCL"), std::string::npos) << e.what();
  }
  c = tiny(2, 1, "none");
  c.training.device = "gpu";
  try {
    config::validate(c);
    ADD_FAILURE() << "training.device gpu accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("training.device"), std::string::npos) << e.what();
  }
}

TEST(TrainerDeviceWithoutBackend, SaysTheBuildHasNoCuda) {
  if (device_backend(DeviceType::cuda)) GTEST_SKIP() << "a CUDA backend is registered";
  config::TrainConfig c = tiny(2, 1, "none");
  c.training.device = "cuda:0";
  try {
    Trainer trainer(c, nullptr, quiet());
    ADD_FAILURE() << "training.device cuda ran without a backend";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("without a CUDA backend"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace braid::train
