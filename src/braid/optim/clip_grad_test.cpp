#include "braid/optim/clip_grad.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "braid/core/rng.h"
#include "braid/kernels/ops.h"

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
  NormReduction twice{[](float m) { return m; }, [](__int128 s) { return 2 * s; }};
  double norm = clip_grad_norm({a}, 1.0, twice);
  EXPECT_DOUBLE_EQ(norm, std::sqrt(50.0));
  EXPECT_FLOAT_EQ(a.to_f32_vector()[0], static_cast<float>(3 / (std::sqrt(50.0) + 1e-6)));
}

TEST(ClipGradNorm, TheNormIsTheSameBitsHoweverTheGradientIsSplit) {
  Rng rng(3);
  Tensor whole = Tensor::randn(Shape{10007}, rng, 1e-3f);
  const double reference = grad_norm({whole});
  for (int64_t cut : {int64_t{1}, int64_t{999}, int64_t{5000}}) {
    // Pieces as ZeRO shards hold them: the max and the sum combined across "ranks".
    std::vector<Tensor> pieces;
    for (int64_t at = 0; at < whole.numel(); at += cut)
      pieces.push_back(whole.flat_range(at, std::min(cut, whole.numel() - at)));
    float global_max = 0;
    for (const Tensor& p : pieces) global_max = std::max(global_max, kernels::max_abs(p));
    __int128 total = 0;
    const int shift = exact_norm_shift(global_max);
    for (const Tensor& p : pieces) total += kernels::sum_squares_fixed(p, shift);
    for (const Tensor& p : pieces) {
      NormReduction r{[&](float) { return global_max; }, [&](__int128) { return total; }};
      EXPECT_EQ(grad_norm({p}, r), reference) << "pieces of " << cut;
    }
  }
  // And it agrees with an f64 sum to its stated precision.
  double sq = 0;
  for (float v : whole.to_f32_vector()) sq += double(v) * v;
  EXPECT_NEAR(reference, std::sqrt(sq), 1e-12);
}

TEST(ClipGradNorm, NonFiniteNormIsReportedNotApplied) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor a = Tensor::from_vector<float>({inf, 1}, Shape{2});
  double norm = clip_grad_norm({a}, 1.0);
  EXPECT_FALSE(is_finite_norm(norm));
  EXPECT_EQ(a.to_f32_vector()[1], 1.0f);  // untouched
  EXPECT_THROW(clip_grad_norm({a}, 1.0, {}, /*error_if_nonfinite=*/true), Error);
  Tensor n = Tensor::from_vector<float>({std::nanf(""), 1}, Shape{2});
  EXPECT_FALSE(is_finite_norm(clip_grad_norm({n}, 1.0)));
  EXPECT_EQ(grad_norm({Tensor::zeros(Shape{5})}), 0.0);
}

}  // namespace
}  // namespace braid::optim
