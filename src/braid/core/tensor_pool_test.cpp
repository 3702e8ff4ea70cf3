#include "braid/core/tensor_pool.h"

#include <gtest/gtest.h>

#include <memory>

#include "braid/core/device_backend.h"
#include "testing/simulated_device.h"

namespace braid {
namespace {

TEST(TensorPool, HandsAGivenTensorBackForItsShapeAndUnchargesItWhileKept) {
  auto tracker = std::make_shared<MemoryTracker>();
  MemoryScope scope(tracker);
  TensorPool pool(2, /*min_bytes=*/0);
  Tensor a = pool.take(Shape{1000, 64}, DType::f32, MemCategory::activations);
  const void* bytes = a.raw_data();
  EXPECT_EQ(tracker->current(MemCategory::activations), 256000);
  pool.give(std::move(a));
  EXPECT_FALSE(a.defined());  // NOLINT(bugprone-use-after-move): give leaves it undefined
  EXPECT_EQ(pool.kept(), 1u);
  EXPECT_EQ(tracker->current(MemCategory::activations), 0);

  // Another shape, dtype or category allocates anew; the kept one waits.
  Tensor other = pool.take(Shape{64, 1000}, DType::f32, MemCategory::activations);
  Tensor half = pool.take(Shape{1000, 64}, DType::bf16, MemCategory::activations);
  Tensor grads = pool.take(Shape{1000, 64}, DType::f32, MemCategory::gradients);
  EXPECT_NE(other.raw_data(), bytes);
  EXPECT_EQ(pool.kept(), 1u);

  Tensor b = pool.take(Shape{1000, 64}, DType::f32, MemCategory::activations);
  EXPECT_EQ(b.raw_data(), bytes);
  EXPECT_EQ(pool.kept(), 0u);
  EXPECT_EQ(tracker->current(MemCategory::activations), 256000 + 256000 + 128000);
  EXPECT_EQ(tracker->peak(MemCategory::activations), 256000 + 256000 + 128000);
}

TEST(TensorPool, KeepsOnlyWholeUnsharedTensorsUpToItsLimit) {
  auto tracker = std::make_shared<MemoryTracker>();
  MemoryScope scope(tracker);
  TensorPool pool(1, /*min_bytes=*/0);
  Tensor a = pool.take(Shape{256}, DType::f32, MemCategory::activations);
  Tensor view = a.narrow(0, 10);
  pool.give(std::move(a));  // the view still uses it: released, not kept
  EXPECT_EQ(pool.kept(), 0u);
  EXPECT_EQ(tracker->current(MemCategory::activations), 1024);
  pool.give(std::move(view));  // a part of its storage: not kept
  EXPECT_EQ(pool.kept(), 0u);
  EXPECT_EQ(tracker->current(MemCategory::activations), 0);

  Tensor b = pool.take(Shape{256}, DType::f32, MemCategory::activations);
  Tensor c = pool.take(Shape{256}, DType::f32, MemCategory::activations);
  pool.give(std::move(b));
  pool.give(std::move(c));  // past the limit of 1
  EXPECT_EQ(pool.kept(), 1u);
  EXPECT_EQ(tracker->current(MemCategory::activations), 0);
  pool.give(Tensor());  // nothing to keep
  EXPECT_EQ(pool.kept(), 1u);
  TensorPool large_only(2, /*min_bytes=*/2048);
  large_only.give(large_only.take(Shape{256}, DType::f32, MemCategory::activations));
  EXPECT_EQ(large_only.kept(), 0u);  // 1 KiB: below the pool's floor
  large_only.give(large_only.take(Shape{512}, DType::f32, MemCategory::activations));
  EXPECT_EQ(large_only.kept(), 1u);
  pool.clear();
  EXPECT_EQ(pool.kept(), 0u);
  EXPECT_EQ(tracker->current(MemCategory::activations), 0);  // nothing released twice
  EXPECT_EQ(tracker->total_current(), 0);
}

TEST(TensorPool, ChargesAReusedTensorToTheCurrentTrackerAndItsBudget) {
  auto first = std::make_shared<MemoryTracker>();
  auto second = std::make_shared<MemoryTracker>();
  TensorPool pool(2, /*min_bytes=*/0);
  {
    MemoryScope scope(first);
    pool.give(pool.take(Shape{512}, DType::f32, MemCategory::activations));
  }
  {
    MemoryScope scope(second);
    Tensor t = pool.take(Shape{512}, DType::f32, MemCategory::activations);
    EXPECT_EQ(first->total_current(), 0);
    EXPECT_EQ(second->current(MemCategory::activations), 2048);
    pool.give(std::move(t));
    EXPECT_EQ(second->total_current(), 0);

    second->set_budget(1024);
    EXPECT_THROW(pool.take(Shape{512}, DType::f32, MemCategory::activations), OutOfMemory);
    EXPECT_EQ(second->total_current(), 0);  // refused: nothing charged, nothing released
    EXPECT_EQ(pool.kept(), 0u);             // and its bytes freed
  }
  EXPECT_EQ(first->total_current(), 0);
  EXPECT_EQ(first->peak(MemCategory::activations), 2048);
}

using TensorPoolOnADevice = braid::testing::SimulatedDeviceTest;

TEST_F(TensorPoolOnADevice, KeepsNoDeviceTensorAndTakesOnTheCurrentDevice) {
  auto tracker = std::make_shared<MemoryTracker>();
  MemoryScope scope(tracker);
  TensorPool pool(2, /*min_bytes=*/0);
  pool.give(pool.take(Shape{64}, DType::f32, MemCategory::activations));  // a host tensor
  DeviceScope on(dev);
  Tensor d = pool.take(Shape{64}, DType::f32, MemCategory::activations);
  EXPECT_EQ(d.device(), dev);  // not the kept host tensor
  EXPECT_EQ(pool.kept(), 1u);
  pool.give(std::move(d));  // the device's allocator caches: not kept (nor freed after it)
  EXPECT_EQ(pool.kept(), 1u);
  EXPECT_EQ(tracker->current(MemCategory::activations), 0);
}

}  // namespace
}  // namespace braid
