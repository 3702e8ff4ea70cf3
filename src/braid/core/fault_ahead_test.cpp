// Note [Faulting in ahead]: the pages of a fresh large tensor get populated beside a writer, and
// nothing the writer put there changes.
#include "braid/core/fault_ahead.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

namespace braid {
namespace {

int64_t resident_bytes() {
  long size = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  const int got = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  return got == 2 ? static_cast<int64_t>(resident) * ::sysconf(_SC_PAGESIZE) : -1;
}

TEST(FaultAhead, PopulatesAFreshTensorBesideItsWriterAndKeepsWhatWasWritten) {
  constexpr int64_t kFloats = int64_t{32} << 20;  // 128 MiB: a fresh mapping
  Tensor t = Tensor::zeros(Shape{kFloats});
  const int64_t before = resident_bytes();
  float* p = t.data<float>();
  for (int64_t i = 0; i < kFloats / 4; ++i) p[i] = static_cast<float>(i % 1000);
  {
    FaultAhead ahead({t, Tensor::zeros(Shape{16})});  // the small one is left alone
    std::thread writer([&] {
      for (int64_t i = kFloats / 4; i < kFloats / 2; ++i) p[i] = static_cast<float>(i % 1000);
    });
    writer.join();
    ahead.wait();
    if (before >= 0) {  // every page of the tensor is in now (no procfs: skip this check)
      EXPECT_GE(resident_bytes() - before, kFloats * 4 * 9 / 10);
    }
  }
  for (int64_t i = 0; i < kFloats; ++i)
    ASSERT_EQ(p[i], i < kFloats / 2 ? static_cast<float>(i % 1000) : 0.0f) << i;
}

// Destroyed at once (as a load that fails right away destroys it), it stops at its next step
// and the tensor reads as it did.
TEST(FaultAhead, DestroyedAtOnceLeavesTheTensorAsItWas) {
  Tensor t = Tensor::zeros(Shape{int64_t{64} << 20});
  t.data<float>()[12345] = 7.0f;
  { FaultAhead ahead({t}); }
  EXPECT_EQ(t.data<float>()[12345], 7.0f);
  EXPECT_EQ(t.data<float>()[(int64_t{64} << 20) - 1], 0.0f);
}

}  // namespace
}  // namespace braid
