// Shared by the tests of several ranks on the simulated device (Note [Training device]): the
// fixture that registers it, and a run on thread ranks whose weights come back to the host.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "braid/core/device_backend.h"
#include "braid/train/generate.h"
#include "testing/simulated_device.h"
#include "testing/simulated_device_group.h"
#include "testing/train/pipeline_parity_util.h"
#include "testing/train/strategy_parity_util.h"

namespace braid::train {

using DeviceRanks = braid::testing::SimulatedDeviceTest;

// The simulated device with its device group registered too (testing/simulated_device_group.h):
// runs with training.device cuda get a device group, as on GPUs with NCCL.
class DeviceGroupRanks : public braid::testing::SimulatedDeviceTest {
 protected:
  void SetUp() override {
    SimulatedDeviceTest::SetUp();
    if (IsSkipped()) return;
    braid::testing::register_simulated_device_group();
  }
  void TearDown() override {
    braid::testing::unregister_simulated_device_group();
    SimulatedDeviceTest::TearDown();
  }
};

// Trains c on n thread ranks with training.device = device; rank 0's gathered weights on the
// host (every rank must hold the same). `staged`: the world group itself staged device tensors
// (not so where only subgroups, the pipeline's or tensor parallelism's, carry them).
inline Tensor train_on(int n, config::TrainConfig c, const std::string& device,
                       bool staged = true) {
  c.training.device = device;
  return same_weights_on_every_rank(n, [&](comm::ProcessGroup& pg) {
    const int64_t held = pg.memory_bytes();
    Trainer t(c, borrow(pg), quiet());
    t.run();
    // The collectives took device tensors: the group staged them (Note [Device staging]) and
    // keeps the host buffers.
    if (device != "cpu" && staged) {
      EXPECT_GT(pg.memory_bytes(), held);
    }
    return t.gather_parameters().to(Device::cpu());
  });
}

// c with a data-parallel strategy (and FSDP's sharding strategy and factor) and a precision.
inline config::TrainConfig with_strategy(config::TrainConfig c, const std::string& strategy,
                                         const std::string& precision, const std::string& how = "",
                                         int64_t factor = 0) {
  c.parallel.strategy = strategy;
  if (!how.empty()) c.parallel.sharding_strategy = how;
  c.parallel.sharding_factor = factor;
  c.training.precision = precision;
  return c;
}

// pp_parity_config (4 micro-batches, clipping) for 2 steps: the tests' time budget.
inline config::TrainConfig pipeline(const std::string& schedule,
                                    const std::string& strategy = "none") {
  PipelineLayout l;
  l.schedule = schedule;
  l.strategy = strategy;
  config::TrainConfig c = pp_parity_config(l);
  c.training.max_steps = 2;
  return c;
}

// Rank 0's tokens sampled (8, temperature and top-k) after training c on n thread ranks: every
// rank samples in lockstep through the pipeline or the tp slices (Trainer::last_logits).
inline std::vector<int32_t> samples_on(int n, config::TrainConfig c, const std::string& device) {
  c.training.device = device;
  std::vector<int32_t> out;
  braid::testing::run_ranks(n, [&](comm::ProcessGroup& pg) {
    Trainer t(c, borrow(pg), quiet());
    t.run();
    SampleOptions so;
    so.max_new_tokens = 8;
    so.top_k = 20;
    Rng rng(7);
    const nn::ModelConfig& m = t.model().config();
    std::vector<int32_t> ids = sample([&t](const Tensor& x) { return t.last_logits(x); },
                                      m.max_seq_len, m.vocab_size, {1, 2, 3}, so, rng);
    if (pg.rank() == 0) out = std::move(ids);
  });
  return out;
}

}  // namespace braid::train
