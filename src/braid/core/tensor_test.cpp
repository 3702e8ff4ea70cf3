#include "braid/core/tensor.h"

#include <gtest/gtest.h>

namespace braid {
namespace {

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, Shape{3, 2});
  Tensor rows = t.narrow(1, 2);
  EXPECT_EQ(rows.shape(), (Shape{2, 2}));
  EXPECT_EQ(rows.data<float>()[0], 2.0f);
  Tensor flat = t.flat_range(3, 2);
  flat.data<float>()[0] = 42;
  EXPECT_EQ(t.data<float>()[3], 42.0f);
  EXPECT_TRUE(flat.shares_storage(t));
  EXPECT_THROW(t.view(Shape{4}), Error);
  EXPECT_THROW(t.narrow(2, 2), Error);
  Tensor bytes = flat.as_bytes();  // elements 3-4: bytes 12-19 of t's
  EXPECT_EQ(bytes.dtype(), DType::u8);
  EXPECT_EQ(bytes.shape(), (Shape{8}));
  EXPECT_EQ(bytes.raw_data(), flat.raw_data());
  EXPECT_EQ(bytes.flat_range(4, 4).raw_data(), t.flat_range(4, 1).raw_data());
  Tensor back = bytes.flat_range(4, 4).reinterpret(DType::f32);
  EXPECT_EQ(back.data<float>()[0], 4.0f);
  EXPECT_THROW(bytes.flat_range(2, 4).reinterpret(DType::f32), Error);  // mid-element
  EXPECT_THROW(bytes.flat_range(4, 3).reinterpret(DType::f32), Error);  // a part of one
}

TEST(Tensor, DtypeConversionRoundTrips) {
  Tensor t = Tensor::from_vector<float>({1.0f, -2.5f, 3.140625f, 65504.0f}, Shape{4});
  for (DType d : {DType::bf16, DType::f16}) {
    Tensor h = t.to(d);
    EXPECT_EQ(h.dtype(), d);
    std::vector<float> back = h.to(DType::f32).to_f32_vector();
    EXPECT_EQ(back[0], 1.0f);
    EXPECT_EQ(back[1], -2.5f);
    EXPECT_EQ(back[2], 3.140625f);
  }
  EXPECT_EQ(bf16_bits_to_f32(f32_to_bf16_bits(1.00390625f)), 1.0f);  // ties to even
  EXPECT_THROW(t.data<int32_t>(), Error);
}

TEST(Tensor, RngIsPerObjectAndDeterministic) {
  Rng a(7), b(7), c(8);
  Tensor x = Tensor::randn(Shape{16}, a);
  Tensor y = Tensor::randn(Shape{16}, b);
  Tensor z = Tensor::randn(Shape{16}, c);
  EXPECT_EQ(x.to_f32_vector(), y.to_f32_vector());
  EXPECT_NE(x.to_f32_vector(), z.to_f32_vector());
  Rng d(7);
  auto st = d.state();
  float first = d.normal();
  d.set_state(st);
  EXPECT_EQ(d.normal(), first);
}

TEST(Tensor, LargeAllocationsArePageAligned) {
  // Storage: 64 KiB and up start on a 4096-byte boundary with a capacity rounded to 4096.
  for (int64_t numel : {int64_t{16384}, int64_t{16385}, int64_t{1} << 20}) {
    Tensor t = Tensor::empty(Shape{numel});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 4096, 0u) << numel;
    EXPECT_EQ(t.storage()->capacity() % 4096, 0u) << numel;
    EXPECT_GE(t.storage()->capacity(), t.nbytes()) << numel;
    EXPECT_EQ(t.storage()->nbytes(), t.nbytes()) << numel;
  }
  Tensor small = Tensor::empty(Shape{100});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.raw_data()) % 64, 0u);
  EXPECT_EQ(small.storage()->capacity(), 448u);
  auto tracker = std::make_shared<MemoryTracker>();
  {
    Tensor t = Tensor::empty(Shape{16385}, DType::f32, MemCategory::optimizer_state, tracker);
    EXPECT_EQ(tracker->current(MemCategory::optimizer_state), 16385 * 4);  // requested bytes
  }
  EXPECT_EQ(tracker->current(MemCategory::optimizer_state), 0);
}

// Note [Large host allocations]: 64 MiB and more are their own mapping, start on a 2 MiB
// boundary, and are charged the bytes asked for.
TEST(Tensor, HugeAllocationsAreHugePageAlignedAndUsable) {
  auto tracker = std::make_shared<MemoryTracker>();
  const int64_t numel = (int64_t{64} << 20) / 4 + 3;
  {
    Tensor t = Tensor::empty(Shape{numel}, DType::f32, MemCategory::activations, tracker);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % (size_t{2} << 20), 0u);
    EXPECT_EQ(tracker->current(MemCategory::activations), numel * 4);
    t.fill_(1.5f);
    EXPECT_EQ(t.data<float>()[0], 1.5f);
    EXPECT_EQ(t.data<float>()[numel - 1], 1.5f);
  }
  EXPECT_EQ(tracker->current(MemCategory::activations), 0);
}

// Tensor::zeros with a category: all zero whatever memory it is given, a large one from a fresh
// mapping (no memset), a small one from a heap that held other values just before.
TEST(Tensor, ZerosAreZeroLargeOrSmallFreshOrReused) {
  auto tracker = std::make_shared<MemoryTracker>();
  for (const int64_t numel : {(int64_t{64} << 20) / 4 + 5, int64_t{100000}, int64_t{37}}) {
    for (int round = 0; round < 2; ++round) {
      {
        Tensor dirty = Tensor::empty(Shape{numel}, DType::f32, MemCategory::other, tracker);
        dirty.fill_(7.0f);
      }
      Tensor t = Tensor::zeros(Shape{numel}, DType::f32, MemCategory::gradients, tracker);
      EXPECT_EQ(tracker->current(MemCategory::gradients), numel * 4);
      const float* p = t.data<float>();
      for (int64_t i = 0; i < numel; i += 997) ASSERT_EQ(p[i], 0.0f) << numel << " at " << i;
      ASSERT_EQ(p[numel - 1], 0.0f) << numel;
      t.fill_(2.0f);  // usable, written through
      EXPECT_EQ(t.data<float>()[numel - 1], 2.0f);
    }
  }
  EXPECT_EQ(tracker->current(MemCategory::gradients), 0);
}

}  // namespace
}  // namespace braid
