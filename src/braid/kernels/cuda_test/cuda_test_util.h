// The CUDA kernel tests' harness: every test builds its inputs on the CPU, runs the reference
// twin there (kernels/reference) and the same op on the GPU through kernels/ops.h (which
// dispatches to cuda/), and compares with the CPU harness's dtype tolerances. Without a GPU
// every test skips, naming why.
#pragma once

#include <gtest/gtest.h>

#include "braid/core/device_backend.h"
#include "braid/core/tensor.h"
#include "braid/kernels/cuda/runtime.h"
#include "braid/kernels/kernels_test_util.h"

namespace braid::kernels::test {

inline Device gpu() {
  return Device{DeviceType::cuda, 0};
}

// Skips the calling test when no CUDA device is visible.
#define BRAID_REQUIRE_GPU()                                                                \
  do {                                                                                     \
    if (!::braid::kernels::cuda::available())                                              \
      GTEST_SKIP() << "no CUDA device is visible (no GPU, or CUDA_VISIBLE_DEVICES empty)"; \
  } while (0)

// A copy on the GPU / back on the CPU.
inline Tensor on_gpu(const Tensor& t) {
  return t.defined() ? t.to(gpu()) : Tensor();
}
inline Tensor on_cpu(const Tensor& t) {
  return t.defined() ? t.to(Device::cpu()) : Tensor();
}

// The CPU harness's fixture, with the GPU required.
class CudaKernelTest : public KernelTest {
 protected:
  void SetUp() override { BRAID_REQUIRE_GPU(); }
};

// Runs its scope with the kernels' fused paths off (mode 1) or on (2) (cuda::fusion_enabled).
struct Fusion {
  explicit Fusion(int mode) { cuda::set_fusion_for_testing(mode); }
  ~Fusion() { cuda::set_fusion_for_testing(0); }
  Fusion(const Fusion&) = delete;
  Fusion& operator=(const Fusion&) = delete;
};

}  // namespace braid::kernels::test
