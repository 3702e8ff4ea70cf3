#include "braid/core/memory_tracker.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>

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

TEST(MemoryTracker, OutOfMemoryIsOneLineWithDeviceAllocationBudgetBreakdownPeaksAndHint) {
  auto tracker = std::make_shared<MemoryTracker>("cpu (rank 2)");
  tracker->charge(MemCategory::parameters, 3 << 20);
  tracker->charge(MemCategory::activations, 2 << 20);
  tracker->release(MemCategory::activations, 1 << 20);
  tracker->set_budget(5 << 20);
  try {
    tracker->charge(MemCategory::scratch, 2 << 20);
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const char* part :
         {"on cpu (rank 2)", "allocating 2.0 MiB of kernel scratch", "would take 6.0 MiB",
          "budget of 5.0 MiB", "In use 4.0 MiB (peak 5.0 MiB)", "parameters 3.0 MiB (peak 3.0 MiB)",
          "activations 1.0 MiB (peak 2.0 MiB)", "communication buffers 0 B", "What would help",
          "smaller micro-batch"})
      EXPECT_NE(msg.find(part), std::string::npos) << msg << "\n  missing: " << part;
  }
}

TEST(MemoryCharge, ResizeRetargetAndMoveKeepTrackersExact) {
  auto a = std::make_shared<MemoryTracker>(), b = std::make_shared<MemoryTracker>();
  {
    MemoryCharge c(MemCategory::communication);  // no tracker: remembered, charged nowhere
    c.resize(100);
    c.retarget(a);
    EXPECT_EQ(a->current(MemCategory::communication), 100);
    c.add(50);
    c.add(-30);
    EXPECT_EQ(a->current(MemCategory::communication), 120);
    b->set_budget(64);
    EXPECT_THROW(c.retarget(b), OutOfMemory);  // stays with a
    EXPECT_EQ(c.tracker(), a);
    b->set_budget(0);
    c.retarget(b);
    EXPECT_EQ(a->current(MemCategory::communication), 0);
    EXPECT_EQ(b->current(MemCategory::communication), 120);
    MemoryCharge moved = std::move(c);
    EXPECT_EQ(moved.bytes(), 120);
    b->set_budget(200);
    EXPECT_THROW(moved.resize(300), OutOfMemory);
    EXPECT_EQ(moved.bytes(), 120);  // unchanged
    EXPECT_EQ(b->current(MemCategory::communication), 120);
    EXPECT_THROW(moved.resize(-1), Error);
  }
  EXPECT_EQ(a->total_current(), 0);
  EXPECT_EQ(b->total_current(), 0);
}

TEST(ParseBytes, AcceptsBinaryDecimalAndPlainForms) {
  EXPECT_EQ(parse_bytes("4GiB"), int64_t{4} << 30);
  EXPECT_EQ(parse_bytes("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(parse_bytes("64KiB"), 64 << 10);
  EXPECT_EQ(parse_bytes("1.5GiB"), int64_t{3} << 29);
  EXPECT_EQ(parse_bytes("4GB"), 4000000000);
  EXPECT_EQ(parse_bytes("1e9"), 1000000000);
  EXPECT_EQ(parse_bytes("123"), 123);
  EXPECT_EQ(parse_bytes("123B"), 123);
  EXPECT_EQ(parse_bytes("0"), 0);
  EXPECT_EQ(parse_bytes("4 gib"), int64_t{4} << 30);
  EXPECT_EQ(parse_bytes("  10 kB "), 10000);
  EXPECT_EQ(parse_bytes("2TiB"), int64_t{2} << 40);
  EXPECT_EQ(parse_bytes("1.5e3 MB"), 1500000000);
  EXPECT_EQ(parse_bytes(".5KiB"), 512);
  EXPECT_EQ(parse_bytes("9223372036854775807"), INT64_MAX);
}

TEST(ParseBytes, RejectsAnythingElseNamingTheTextAndTheForms) {
  for (const char* bad :
       {"", "   ", "-1GiB", "-5", "4XB", "GiB", "4 G", "1.5.2GiB", "1e", "e9", "+4GiB", "nan",
        "inf", "0x10", "9223372036854775808", "8388608TiB", "1e30", "4GiB extra"}) {
    try {
      parse_bytes(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("'" + std::string(bad) + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("GiB"), std::string::npos) << msg;
      EXPECT_NE(msg.find("powers of 1000"), std::string::npos) << msg;
    }
  }
}

TEST(AvailableMemory, ReadsMemAvailableFromProcMeminfo) {
  const int64_t bytes = available_memory_bytes();
  if (!std::ifstream("/proc/meminfo")) GTEST_SKIP() << "no /proc/meminfo";
  EXPECT_GT(bytes, 0);
  EXPECT_EQ(bytes % 1024, 0);  // reported in kB
}

}  // namespace
}  // namespace braid
