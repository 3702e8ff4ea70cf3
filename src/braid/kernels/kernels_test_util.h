// Shared pieces of the kernel harness: fresh random inputs, and a comparison whose tolerance
// follows the dtype (f32 tight, f16 and bf16 looser), scaled by the expected tensor's
// magnitude.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "braid/core/tensor.h"
#include "testing/tensor_compare.h"

namespace braid::kernels::test {

// Seed from BRAID_TEST_SEED when set (to reproduce a failure), else a fixed one.
inline uint64_t test_seed() {
  const char* s = std::getenv("BRAID_TEST_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 20240611ull;
}

// f16 and bf16: about five units of their rounding (u = 2^-11 = 4.9e-4, 2^-8 = 3.9e-3): the
// kernels compute in f32 from the same rounded inputs as the reference, so the output's
// rounding dominates. f32: the f32 summation order dominates.
inline double tol_for(DType d) {
  if (d == DType::f32) return 2e-5;
  return d == DType::f16 ? 2.5e-3 : 2e-2;
}

// Every floating dtype the kernels take.
inline auto float_dtypes() {
  return ::testing::Values(DType::f32, DType::bf16, DType::f16);
}

// |a - b| <= tol * (|b| + max|expected|) element-wise.
inline ::testing::AssertionResult close(const Tensor& actual, const Tensor& expected, double tol) {
  double mag = 0;
  for (float e : expected.to_f32_vector()) mag = std::max(mag, static_cast<double>(std::fabs(e)));
  return braid::testing::all_close(actual, expected, tol, tol * std::max(mag, 1e-3));
}

class KernelTest : public ::testing::TestWithParam<DType> {
 protected:
  DType dt() const { return GetParam(); }
  double tol() const { return tol_for(dt()); }
  Tensor rnd(const Shape& s, float stddev = 1.0f) { return Tensor::randn(s, rng_, stddev, dt()); }
  Tensor rnd_f32(const Shape& s, float stddev = 1.0f) {
    return Tensor::randn(s, rng_, stddev, DType::f32);
  }
  Tensor ids(const Shape& s, int64_t vocab) {
    Tensor t = Tensor::empty(s, DType::i32);
    int32_t* p = t.data<int32_t>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<int32_t>(rng_.below(vocab));
    return t;
  }
  Rng rng_{test_seed()};
};

inline std::string dtype_param_name(const ::testing::TestParamInfo<DType>& info) {
  return std::string(dtype_name(info.param));
}

}  // namespace braid::kernels::test
