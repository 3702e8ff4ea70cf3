// Shared by the tests of several ranks on the simulated device (Note [Training device]): the
// fixture that registers it, and a run on thread ranks whose weights come back to the host.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "braid/core/device_backend.h"
#include "testing/simulated_device.h"
#include "testing/train/strategy_parity_util.h"

namespace braid::train {

using DeviceRanks = braid::testing::SimulatedDeviceTest;

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

}  // namespace braid::train
