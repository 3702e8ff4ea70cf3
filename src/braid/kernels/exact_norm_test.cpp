// Note [Exact norm]: the fixed-point sum of squares equals its naive twin exactly, is the same
// for any split of the elements into pieces, and stays within the stated error of an f64 sum.
#include <algorithm>
#include <cmath>
#include <vector>

#include "braid/kernels/kernels_test_util.h"
#include "braid/kernels/ops.h"
#include "braid/kernels/reference/reference.h"

namespace braid::kernels::test {
namespace {

namespace ref = braid::kernels::reference;

class ExactNorm : public KernelTest {};

int shift_for(float max) {
  int e = 0;
  std::frexp(max, &e);  // max < 2^e
  return 55 - 2 * e;
}

TEST_P(ExactNorm, MatchesTheNaiveTwinExactly) {
  for (int64_t n : {int64_t{1}, int64_t{2047}, int64_t{2048}, int64_t{100003}}) {
    Tensor x = rnd(Shape{n}, 0.01f);
    const float m = max_abs(x);
    EXPECT_EQ(m, ref::max_abs(x)) << n;
    const int s = shift_for(m);
    EXPECT_TRUE(sum_squares_fixed(x, s) == ref::sum_squares_fixed(x, s)) << n;
  }
}

TEST_P(ExactNorm, AnySplitGivesTheSameTotal) {
  const int64_t n = 50000;
  Tensor x = rnd(Shape{n});
  x.flat_range(100, 1000).fill_(1e-7);  // tiny and
  x.flat_range(7, 1).fill_(-300.0);     // huge elements together
  const int s = shift_for(max_abs(x));
  const __int128 whole = sum_squares_fixed(x, s);
  for (int64_t cut : {int64_t{1}, int64_t{17}, int64_t{2048}, int64_t{24999}}) {
    __int128 parts = 0;
    for (int64_t at = 0; at < n; at += cut)
      parts += sum_squares_fixed(x.flat_range(at, std::min(cut, n - at)), s);
    EXPECT_TRUE(parts == whole) << "pieces of " << cut;
  }
  const double exact = std::ldexp(static_cast<double>(whole), -s);
  const double f64 = ref::sum_squares(x);
  EXPECT_NEAR(exact, f64, static_cast<double>(n) * std::ldexp(1.0, -53) * 300.0 * 300.0);
  EXPECT_NEAR(exact, f64, 1e-9 * f64);
}

// The sums at several shifts in one pass (the offloaded norm's, Note [Offloaded norm]) are the
// calls one by one, in any order, including shifts whose terms all round to zero.
TEST_P(ExactNorm, SeveralShiftsInOnePassAreTheCallsOneByOne) {
  for (int64_t n : {int64_t{1}, int64_t{129}, int64_t{100003}}) {
    Tensor x = rnd(Shape{n}, 0.5f);
    x.flat_range(0, 1).fill_(-7.0);
    const int s = shift_for(max_abs(x));
    const int shifts[5] = {s - 2, s, s - 4, s - 6, s - 120};  // any order
    __int128 sums[5] = {};
    sum_squares_fixed(x, shifts, 5, sums);
    for (int k = 0; k < 5; ++k)
      EXPECT_TRUE(sums[k] == sum_squares_fixed(x, shifts[k]))
          << n << " elements, shift " << shifts[k];
  }
}

TEST_P(ExactNorm, NonFiniteMaxIsInfinite) {
  Tensor x = rnd(Shape{4000});
  EXPECT_TRUE(std::isfinite(max_abs(x)));
  x.flat_range(3000, 1).fill_(NAN);
  EXPECT_EQ(max_abs(x), INFINITY);
  x.flat_range(3000, 1).fill_(-INFINITY);
  EXPECT_EQ(max_abs(x), INFINITY);
  EXPECT_EQ(max_abs(Tensor::empty(Shape{0}, dt())), 0.0f);
}

// The list ops (one launch on a GPU, Note [Multi-tensor launches]) are the calls one by one,
// undefined and empty tensors skipped.
TEST_P(ExactNorm, ListsAreTheCallsOneByOne) {
  std::vector<Tensor> xs{rnd(Shape{2049}, 0.01f), Tensor{}, Tensor::empty(Shape{0}, dt()),
                         rnd(Shape{7}, 3.0f), rnd(Shape{100003})};
  float m = 0.0f;
  for (const Tensor& x : xs)
    if (x.defined()) m = std::max(m, max_abs(x));
  EXPECT_EQ(max_abs(xs), m);
  const int s = shift_for(m);
  __int128 sum = 0;
  for (const Tensor& x : xs)
    if (x.defined()) sum += sum_squares_fixed(x, s);
  EXPECT_TRUE(sum_squares_fixed(xs, s) == sum);
  std::vector<Tensor> one_by_one;
  for (const Tensor& x : xs) one_by_one.push_back(x.defined() ? x.clone() : Tensor{});
  scale(xs, -0.37f);
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!xs[i].defined()) continue;
    scale(one_by_one[i], -0.37f);
    EXPECT_TRUE(braid::testing::bit_equal(xs[i], one_by_one[i])) << "tensor " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, ExactNorm, float_dtypes(), dtype_param_name);

}  // namespace
}  // namespace braid::kernels::test
