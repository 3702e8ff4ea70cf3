// Note [Simulated device]: device tensors backed by host memory, for testing device paths on any
// machine. Host code that touches them outside a kernel throws, naming the device.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "braid/core/device_backend.h"
#include "braid/core/tensor.h"
#include "testing/simulated_device.h"

namespace braid {
namespace {

using SimulatedDevice = braid::testing::SimulatedDeviceTest;

TEST_F(SimulatedDevice, TensorsMoveAndConvertButRefuseHostAccess) {
  auto tracker = std::make_shared<MemoryTracker>("cuda:0");
  MemoryScope mem(tracker, MemCategory::activations);
  Tensor host = Tensor::from_vector(std::vector<float>{1.5f, -2.0f, 3.25f}, Shape{3});
  Tensor d = host.to(dev);
  EXPECT_EQ(d.device(), dev);
  // The host tensor and its device copy, 12 bytes each, both charged to the scope's tracker.
  EXPECT_EQ(tracker->current(MemCategory::activations), 24);
  EXPECT_EQ(d.to(Device::cpu()).to_f32_vector(), host.to_f32_vector());
  EXPECT_EQ(d.to(DType::bf16).to_f32_vector(), host.to(DType::bf16).to_f32_vector());
  EXPECT_FLOAT_EQ(d.flat_range(2, 1).item(), 3.25f);
  try {
    (void)d.data<float>();
    ADD_FAILURE() << "host access to a simulated device tensor did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  {
    HostKernelScope kernel;  // what the CPU kernels run inside
    EXPECT_EQ(d.data<float>()[1], -2.0f);
  }
  d.zero_();
  EXPECT_EQ(d.to_f32_vector(), (std::vector<float>{0, 0, 0}));
  // Under a DeviceScope, new tensors land on the device.
  DeviceScope scope(dev);
  EXPECT_EQ(Tensor::zeros(Shape{2}).device(), dev);
  EXPECT_EQ(Tensor::empty(Shape{2}, DType::i32, Device::cpu()).device(), Device::cpu());
}

// Note [Pinned host memory]: pinned by the device's backend where one is registered (here the
// simulated one), plain host memory otherwise; host memory either way, charged to its category.
TEST_F(SimulatedDevice, PinnedHostMemoryComesFromTheBackend) {
  auto tracker = std::make_shared<MemoryTracker>();
  MemoryScope scope(tracker);
  Tensor p = Tensor::pinned(Shape{1000}, DType::f32, MemCategory::optimizer_state);
  EXPECT_TRUE(p.is_pinned());
  EXPECT_EQ(p.device(), Device::cpu());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p.raw_data()) % 4096, 0u);
  EXPECT_EQ(tracker->current(MemCategory::optimizer_state), 4000);
  p.fill_(2.5);
  EXPECT_EQ(p.to(dev).to(Device::cpu()).to_f32_vector(), std::vector<float>(1000, 2.5f));
  p = Tensor();
  EXPECT_EQ(tracker->current(MemCategory::optimizer_state), 0);
  register_device_backend(DeviceType::cuda, nullptr);  // no backend: plain host memory
  Tensor plain = Tensor::pinned(Shape{10}, DType::f32, MemCategory::other);
  EXPECT_FALSE(plain.is_pinned());
  EXPECT_EQ(plain.device(), Device::cpu());
}

}  // namespace
}  // namespace braid
