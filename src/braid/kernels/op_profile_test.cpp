// Note [Op profile]: an op counts once, as itself, and only while profiling is on.
#include "braid/kernels/op_profile.h"

#include <gtest/gtest.h>

#include "braid/core/rng.h"
#include "braid/core/tensor.h"
#include "braid/kernels/ops.h"

namespace braid::kernels {
namespace {

TEST(OpProfile, CountsTheOutermostOpOnlyWhileOn) {
  Rng rng(1);
  Tensor x = Tensor::randn({64, 32}, rng), w = Tensor::randn({16, 32}, rng);
  Tensor y = Tensor::empty({64, 16});
  reset_op_totals();
  linear_forward(y, x, w, nullptr);  // off: not counted
  set_op_profiling(true);
  for (int i = 0; i < 3; ++i) linear_forward(y, x, w, nullptr);
  add_forward(y, y, y);
  set_op_profiling(false);
  linear_forward(y, x, w, nullptr);
  const auto totals = op_totals();
  ASSERT_EQ(totals.size(), 2u);  // linear_forward's own matmul is not a second entry
  EXPECT_EQ(totals[0].op, "add_forward");
  EXPECT_EQ(totals[0].calls, 1);
  EXPECT_EQ(totals[1].op, "linear_forward");
  EXPECT_EQ(totals[1].calls, 3);
  EXPECT_GT(totals[1].seconds, 0);
  reset_op_totals();
  EXPECT_TRUE(op_totals().empty());
}

}  // namespace
}  // namespace braid::kernels
