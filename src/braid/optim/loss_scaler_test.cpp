#include "braid/optim/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>

namespace braid::optim {
namespace {

TEST(DynamicLossScaler, GrowsAfterIntervalBacksOffOnInf) {
  DynamicLossScaler s({.init_scale = 1024, .growth_interval = 3});
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_DOUBLE_EQ(s.scale(), 1024);
  EXPECT_TRUE(s.update(false));
  EXPECT_DOUBLE_EQ(s.scale(), 2048);
  EXPECT_TRUE(s.update(false));
  EXPECT_FALSE(s.update(true));  // skip the step
  EXPECT_DOUBLE_EQ(s.scale(), 1024);
  EXPECT_EQ(s.state().growth_tracker, 0);
}

TEST(DynamicLossScaler, MinScaleFloorsBackoff) {
  DynamicLossScaler s({.init_scale = 2, .min_scale = 1});
  s.update(true);
  s.update(true);
  EXPECT_DOUBLE_EQ(s.scale(), 1);
}

TEST(DynamicLossScaler, UnscaleDividesAndDetectsInfNan) {
  DynamicLossScaler s({.init_scale = 4});
  Tensor g = Tensor::from_vector<float>({8, -4}, Shape{2});
  EXPECT_FALSE(s.unscale({g}));
  EXPECT_EQ(g.to_f32_vector(), (std::vector<float>{2, -1}));
  Tensor bad = Tensor::from_vector<float>({1, std::nanf("")}, Shape{2});
  EXPECT_TRUE(s.unscale({g, bad}));
  // Another rank found one: everyone agrees.
  Tensor ok = Tensor::from_vector<float>({1}, Shape{1});
  EXPECT_TRUE(s.unscale({ok}, [](double local) { return local + 1.0; }));
}

TEST(DynamicLossScaler, StateRoundTrips) {
  DynamicLossScaler a({.init_scale = 256, .growth_interval = 5});
  a.update(false);
  a.update(true);
  a.update(false);
  DynamicLossScaler b({.growth_interval = 5});
  b.set_state(a.state());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(a.update(false), b.update(false));
  EXPECT_DOUBLE_EQ(a.scale(), b.scale());
  EXPECT_EQ(a.state().growth_tracker, b.state().growth_tracker);
  EXPECT_THROW(b.set_state({0.0, 0}), Error);
}

}  // namespace
}  // namespace braid::optim
