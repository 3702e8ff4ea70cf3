#include "braid/optim/clip_grad.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace braid::optim {
namespace {

TEST(ClipGradNorm, ClipsToMaxNormLikeTorch) {
  Tensor a = Tensor::from_vector<float>({3, 0}, Shape{2});
  Tensor b = Tensor::from_vector<float>({0, 0, 4}, Shape{3});
  double norm = clip_grad_norm({a, b}, 1.0);
  EXPECT_DOUBLE_EQ(norm, 5.0);
  float coef = static_cast<float>(1.0 / (5.0 + 1e-6));
  EXPECT_FLOAT_EQ(a.to_f32_vector()[0], 3 * coef);
  EXPECT_FLOAT_EQ(b.to_f32_vector()[2], 4 * coef);
}

TEST(ClipGradNorm, BelowMaxNormLeavesGradientsAlone) {
  Tensor a = Tensor::from_vector<float>({3, 4}, Shape{2});
  EXPECT_DOUBLE_EQ(clip_grad_norm({a}, 10.0), 5.0);
  EXPECT_EQ(a.to_f32_vector(), (std::vector<float>{3, 4}));
}

TEST(ClipGradNorm, ReducerGivesTheGlobalNorm) {
  // Two ranks each holding [3, 4]: global norm sqrt(50).
  Tensor a = Tensor::from_vector<float>({3, 4}, Shape{2});
  double norm = clip_grad_norm({a}, 1.0, [](double local) { return 2 * local; });
  EXPECT_DOUBLE_EQ(norm, std::sqrt(50.0));
  EXPECT_FLOAT_EQ(a.to_f32_vector()[0], static_cast<float>(3 / (std::sqrt(50.0) + 1e-6)));
}

TEST(ClipGradNorm, NonFiniteNormIsReportedNotApplied) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor a = Tensor::from_vector<float>({inf, 1}, Shape{2});
  double norm = clip_grad_norm({a}, 1.0);
  EXPECT_FALSE(is_finite_norm(norm));
  EXPECT_EQ(a.to_f32_vector()[1], 1.0f);  // untouched
  EXPECT_THROW(clip_grad_norm({a}, 1.0, {}, /*error_if_nonfinite=*/true), Error);
  Tensor n = Tensor::from_vector<float>({std::nanf(""), 1}, Shape{2});
  EXPECT_TRUE(std::isnan(clip_grad_norm({n}, 1.0)));
}

}  // namespace
}  // namespace braid::optim
