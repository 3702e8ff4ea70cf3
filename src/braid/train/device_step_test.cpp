// A training step on a device against the same step on the CPU: one model initialised alike on
// each device (braid draws weights on the host, so both start bit-identical), the same batches.
// On a GPU (BRAID_CUDA=ON with a device visible) the loss and every gradient agree within the
// dtype's tolerance, and three AdamW steps with clipping give the same losses. Elsewhere the
// same run goes to the simulated device (Note [Simulated device]): every host access the step
// makes to device memory would throw there, and the CPU kernels running on it must give the CPU
// run's bits exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "braid/core/device_backend.h"
#include "braid/core/rng.h"
#include "braid/kernels/device.h"
#include "braid/nn/transformer.h"
#include "braid/optim/clip_grad.h"
#include "braid/optim/optimizer.h"
#include "braid/optim/param_groups.h"

namespace braid {
namespace {

struct Case {
  std::string preset;
  DType dtype;
};

struct StepResult {
  std::vector<float> losses;
  std::vector<float> first_grads;  // the f32 gradient buffer after the first backward
};

StepResult train(const Case& c, Device device, int steps) {
  DeviceScope scope(device);
  nn::ModelConfig cfg = nn::ModelConfig::preset(c.preset);
  nn::TransformerOptions topts;
  topts.materialize = false;
  nn::Transformer model(cfg, topts);
  model.materialize(true, nn::ParamLayout::kAlign, c.dtype, true);
  model.init_weights(42);
  std::vector<optim::ParamSlice> slices;
  std::vector<Tensor> grads;
  for (const auto& e : model.flat().entries()) {
    Tensor p = model.flat().params().flat_range(e.range.offset, e.range.size).view(e.param->shape);
    Tensor g = model.flat().grads().flat_range(e.range.offset, e.range.size).view(e.param->shape);
    slices.push_back(optim::ParamSlice::whole(e.name, p, g));
    grads.push_back(g);
  }
  optim::AdamW opt(optim::split_decay_groups(slices, {}), 0.9f, 0.95f, 1e-8f);
  Rng rng(5);
  const int64_t B = 2, T = 64;
  StepResult r;
  for (int s = 0; s < steps; ++s) {
    std::vector<int32_t> in(B * T), tg(B * T);
    for (auto& t : in) t = static_cast<int32_t>(rng.below(cfg.vocab_size));
    for (size_t i = 0; i < tg.size(); ++i) tg[i] = i % 7 == 3 ? -100 : in[(i + 1) % in.size()];
    Tensor ids = Tensor::from_vector(in, Shape{B, T}),
           targets = Tensor::from_vector(tg, Shape{B, T});
    model.zero_grad();
    autograd::Variable loss = model.loss(ids, targets);
    loss.backward();
    if (s == 0) r.first_grads = model.flat().grads().to_f32_vector();
    optim::clip_grad_norm(grads, 1.0);
    opt.step(1e-3f);
    model.flat().sync_compute();
    r.losses.push_back(loss.value().item());
  }
  return r;
}

class DeviceStepTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    gpu_ = kernels::device_supported(DeviceType::cuda);
    // A CUDA build on a machine without a GPU: the real backend is registered, so no simulated
    // one can be, and there is no device to run on.
    if (!gpu_ && !register_simulated_device()) GTEST_SKIP() << "no CUDA device is visible";
  }
  void TearDown() override {
    if (device_backend(DeviceType::cuda) == &simulated_device_backend())
      register_device_backend(DeviceType::cuda, nullptr);
  }
  bool gpu_ = false;
};

TEST_P(DeviceStepTest, MatchesTheCpuStep) {
  const Case c = GetParam();
  const StepResult cpu = train(c, Device::cpu(), 3);
  const StepResult dev = train(c, Device{DeviceType::cuda, 0}, 3);
  if (!gpu_) {  // the simulated device runs the CPU kernels: the same bits
    EXPECT_EQ(dev.losses, cpu.losses);
    EXPECT_EQ(dev.first_grads, cpu.first_grads);
    return;
  }
  const StepResult& gpu = dev;
  const double tol = c.dtype == DType::f32 ? 1e-4 : 2e-2;
  ASSERT_EQ(cpu.first_grads.size(), gpu.first_grads.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < cpu.first_grads.size(); ++i) {
    const double d = gpu.first_grads[i] - cpu.first_grads[i];
    diff += d * d;
    norm += static_cast<double>(cpu.first_grads[i]) * cpu.first_grads[i];
  }
  EXPECT_LE(std::sqrt(diff), tol * std::sqrt(norm)) << "gradient of the first step";
  for (size_t s = 0; s < cpu.losses.size(); ++s) {
    EXPECT_NEAR(gpu.losses[s], cpu.losses[s], tol * std::fabs(cpu.losses[s])) << "step " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, DeviceStepTest,
    ::testing::Values(Case{"gpt2-tiny", DType::f32}, Case{"gpt2-tiny", DType::bf16},
                      Case{"llama-tiny", DType::f32}, Case{"llama-tiny", DType::bf16}),
    [](const auto& info) {
      std::string n = info.param.preset + "_" + std::string(dtype_name(info.param.dtype));
      for (char& ch : n) ch = ch == '-' ? '_' : ch;
      return n;
    });

}  // namespace
}  // namespace braid
