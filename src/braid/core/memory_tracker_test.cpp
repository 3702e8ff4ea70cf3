#include "braid/core/memory_tracker.h"

#include <gtest/gtest.h>

#include "braid/core/tensor.h"

namespace braid {
namespace {

TEST(MemoryTracker, ChargesCategoriesAndPeaks) {
  auto tracker = std::make_shared<MemoryTracker>();
  {
    MemoryScope scope(tracker, MemCategory::activations);
    Tensor a = Tensor::empty(Shape{256}, DType::f32);
    Tensor p = Tensor::empty(Shape{64}, DType::bf16, MemCategory::parameters);
    EXPECT_EQ(tracker->current(MemCategory::activations), 1024);
    EXPECT_EQ(tracker->current(MemCategory::parameters), 128);
    Tensor view = a.narrow(0, 10);  // views charge nothing
    EXPECT_EQ(tracker->total_current(), 1152);
  }
  EXPECT_EQ(tracker->total_current(), 0);
  EXPECT_EQ(tracker->peak(MemCategory::activations), 1024);
  EXPECT_EQ(tracker->total_peak(), 1152);
}

TEST(MemoryTracker, BudgetOverflowThrowsWithBreakdown) {
  auto tracker = std::make_shared<MemoryTracker>();
  tracker->set_budget(4096);
  MemoryScope scope(tracker, MemCategory::gradients);
  Tensor g = Tensor::empty(Shape{512}, DType::f32);
  try {
    Tensor h = Tensor::empty(Shape{1024}, DType::f32, MemCategory::optimizer_state);
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("optimizer state"), std::string::npos) << msg;
    EXPECT_NE(msg.find("gradients 2.0 KiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("activation checkpointing"), std::string::npos) << msg;
  }
  EXPECT_EQ(tracker->total_current(), 2048);  // the failed allocation charged nothing
}

}  // namespace
}  // namespace braid
