// Finite-difference gradient check, the one shared helper for every differentiable op.
//
// Checks the analytic gradient of L = sum(f(inputs) * R), R a fixed random projection, with
// respect to each checked input against central differences (L(x + eps) - L(x - eps)) / 2eps.
// The forward runs in f32; L is accumulated in f64, so use eps ~1e-2 and small values, and
// tolerances ~1e-2 relative. Every element of every checked input is perturbed: keep shapes
// small (tens of elements).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "braid/autograd/variable.h"

namespace braid::testing {

struct GradcheckOptions {
  double eps = 1e-2;
  double rtol = 2e-3;
  double atol = 1e-3;
  // Indices of the inputs whose gradient is checked (they get requires_grad); empty = all.
  std::vector<int> check_inputs = {};
  uint64_t seed = 1234;  // for R
};

using GradcheckFn =
    std::function<autograd::Variable(const std::vector<autograd::Variable>& inputs)>;

// Passes when |analytic - numeric| <= atol + rtol * |numeric| for every checked element; the
// failure message names the input, the flat index and both values.
::testing::AssertionResult gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                                     const GradcheckOptions& options = {});

}  // namespace braid::testing
