// Tensor comparison for tests: max relative error with a floor, and a gtest-friendly
// assertion that names the worst element.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "braid/core/tensor.h"

namespace braid::testing {

struct CompareResult {
  double max_abs = 0;
  double max_rel = 0;  // |a-b| / max(|b|, floor)
  int64_t worst = -1;  // index of the worst relative error
  std::string describe(const Tensor& a, const Tensor& b) const;
};

CompareResult compare(const Tensor& actual, const Tensor& expected, double floor = 1e-6);

// Passes when shapes match and every element has |a-b| <= atol + rtol * |b|.
::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected,
                                     double rtol = 1e-5, double atol = 1e-6);

// Bit-for-bit equality (same dtype, shape and bytes).
::testing::AssertionResult bit_equal(const Tensor& a, const Tensor& b);

}  // namespace braid::testing
