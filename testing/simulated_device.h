// A gtest fixture that registers the simulated device (Note [Simulated device],
// braid/core/device_backend.h) in place of CUDA for one test and takes it away after; the test
// skips, saying why, where a real CUDA backend is registered (a BRAID_CUDA_CHECK build).
#pragma once

#include <gtest/gtest.h>

#include "braid/core/device_backend.h"

namespace braid::testing {

class SimulatedDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!register_simulated_device()) GTEST_SKIP() << "a real CUDA backend is registered";
  }
  void TearDown() override {
    if (device_backend(DeviceType::cuda) == &simulated_device_backend())
      register_device_backend(DeviceType::cuda, nullptr);
  }
  const Device dev{DeviceType::cuda, 0};
};

}  // namespace braid::testing
