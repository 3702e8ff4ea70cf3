#include <gtest/gtest.h>

#include <thread>

#include "braid/autograd/functions.h"
#include "braid/autograd/test_nodes.h"
#include "braid/autograd/variable.h"

namespace braid::autograd {
namespace {

using test::mul;
using test::sum;
using test::vec;

std::vector<float> values(const Tensor& t) {
  return t.to_f32_vector();
}

TEST(Engine, ProductRule) {
  Variable a(vec({1, 2, 3}), true, "a");
  Variable b(vec({4, 5, 6}), true, "b");
  Variable y = mul(a, b);
  EXPECT_FALSE(y.is_leaf());
  y.backward(vec({1, 10, 100}));
  EXPECT_EQ(values(a.grad()), (std::vector<float>{4, 50, 600}));
  EXPECT_EQ(values(b.grad()), (std::vector<float>{1, 20, 300}));
  EXPECT_EQ(a.grad().storage()->category(), MemCategory::gradients);
}

TEST(Engine, LeavesAccumulateIntoTheirGradTensor) {
  Variable a(vec({1, 2}), true, "a");
  Variable b(vec({3, 4}), false, "b");
  Tensor flat = Tensor::zeros(Shape{4});  // like a flat gradient buffer
  a.set_grad(flat.flat_range(1, 2));
  sum(mul(a, b)).backward();
  sum(mul(a, b)).backward();
  EXPECT_EQ(values(flat), (std::vector<float>{0, 6, 8, 0}));
  EXPECT_FALSE(b.grad().defined());
}

TEST(Engine, ParameterUsedTwiceGetsBothContributionsAndOneHookCall) {
  Variable w(vec({2, 3}), true, "w");
  Variable x(vec({5, 7}), true, "x");
  w.zero_grad();
  int calls = 0;
  std::vector<float> seen;
  w.register_post_accumulate_hook([&](Variable& v) {
    ++calls;
    seen = values(v.grad());
  });
  Variable h = mul(w, x);       // first use
  Variable y = sum(mul(w, h));  // second use: y = sum(w^2 x)
  y.backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, (std::vector<float>{2 * 2 * 5, 2 * 3 * 7}));  // d/dw w^2 x = 2 w x
  EXPECT_EQ(values(w.grad()), seen);
}

TEST(Engine, HooksFireInReverseOrderOfUse) {
  Variable p1(vec({1}), true, "p1");
  Variable p2(vec({2}), true, "p2");
  Variable x(vec({3}), false, "x");
  std::vector<std::string> order;
  for (Variable* p : {&p1, &p2})
    p->register_post_accumulate_hook([&](Variable& v) { order.push_back(v.name()); });
  sum(mul(p2, mul(p1, x))).backward();
  EXPECT_EQ(order, (std::vector<std::string>{"p2", "p1"}));
}

TEST(Engine, ActivationsAreFreedByBackward) {
  auto tracker = std::make_shared<MemoryTracker>();
  MemoryScope scope(tracker);
  Variable w(vec({1, 2, 3, 4}), true, "w");
  {
    Variable x(vec({1, 1, 1, 1}), false, "x");
    Variable loss = sum(mul(mul(w, x), w));
    EXPECT_GT(tracker->current(MemCategory::activations), 0);
    loss.backward();
    // Only the loss value itself (one float) is still held.
    EXPECT_EQ(tracker->current(MemCategory::activations), 4);
  }
  EXPECT_EQ(tracker->current(MemCategory::activations), 0);
  EXPECT_EQ(values(w.grad()), (std::vector<float>{2, 4, 6, 8}));
  EXPECT_EQ(tracker->current(MemCategory::gradients), 16);
}

TEST(Engine, ResidualAddsHandTheirGradientDownAndBranchesAccumulateIntoIt) {
  // r2 = r1 + r1 w, r1 = h + h w, h = w x: each add hands dout's buffer to its residual input
  // (Note [Gradient buffers]); the branch's mul then adds into that same buffer.
  Variable w(vec({1, 2}), true, "w");
  Variable x(vec({3, 4}), true, "x");
  Variable h = mul(w, x);
  Variable r1 = add(h, mul(h, w));
  Variable r2 = add(r1, mul(r1, w));
  sum(r2).backward();
  // y = sum w x (1 + w)^2: dy/dw = x (1 + w)^2 + 2 w x (1 + w), dy/dx = w (1 + w)^2.
  EXPECT_EQ(values(w.grad()), (std::vector<float>{24, 84}));
  EXPECT_EQ(values(x.grad()), (std::vector<float>{4, 18}));
  // The same input twice: add(h, h) gets both contributions, in a buffer of its own.
  Variable a(vec({1, 2}), true, "a");
  Variable g = mul(a, a);
  sum(add(g, g)).backward();  // d/da 2 a^2 = 4 a
  EXPECT_EQ(values(a.grad()), (std::vector<float>{4, 8}));
  // A caller's seed is not handed down (not the engine's to reuse): it is unchanged after.
  Variable b(vec({1, 2}), true, "b");
  Tensor seed = vec({5, 7});
  add(mul(b, b), b).backward(seed);
  EXPECT_EQ(values(seed), (std::vector<float>{5, 7}));
  EXPECT_EQ(values(b.grad()), (std::vector<float>{15, 35}));  // (2 b + 1) seed
}

TEST(Engine, ALinearSetsItsInputsNewGradientAndALaterUseAddsToIt) {
  // x (non-leaf, [2, 2]) feeds two linears: the one backward reaches first sets x's new
  // gradient buffer (not zeroed: sets_fresh_grad), the other adds into it; the add's second
  // input gets a copy of dout. y = sum(x W1^T + b1 + (x W2^T)^2).
  Variable x0(vec({1, 2, 3, 4}), true, "x0");
  Variable x = reshape(mul(x0, Variable(vec({1, 1, 1, 1}), false, "one")), Shape{2, 2});
  Variable w1(vec({1, 2, 3, 4}), true, "w1");
  Variable w2(vec({-1, 0, 2, 1}), true, "w2");
  Variable b1(vec({0.5f, 0}), true, "b1");
  Variable h1 = linear(x, reshape(w1, Shape{2, 2}), b1);
  Variable h2 = linear(x, reshape(w2, Shape{2, 2}), Variable());
  sum(reshape(add(h1, mul(h2, h2)), Shape{4})).backward();
  // dx = 1 W1 + 2 h2 W2, h2 = [[-1, 4], [-3, 10]]; dW2 = (2 h2)^T x; db1 = column sums of 1.
  EXPECT_EQ(values(x0.grad()), (std::vector<float>{22, 14, 50, 26}));
  EXPECT_EQ(values(w2.grad()), (std::vector<float>{-20, -28, 68, 96}));
  EXPECT_EQ(values(w1.grad()), (std::vector<float>{4, 6, 4, 6}));
  EXPECT_EQ(values(b1.grad()), (std::vector<float>{2, 2}));
}

TEST(Engine, SecondBackwardThroughAFreedGraphThrows) {
  Variable w(vec({1}), true, "w");
  Variable y = sum(mul(w, w));
  y.backward();
  EXPECT_THROW(y.backward(), Error);
}

TEST(Engine, BackwardErrors) {
  Variable a(vec({1, 2}), false, "a");
  EXPECT_THROW(sum(a).backward(), Error);  // nothing requires grad
  Variable w(vec({1, 2}), true, "w");
  EXPECT_THROW(mul(w, w).backward(), Error);  // non-scalar without dout
  EXPECT_THROW(mul(w, w).backward(vec({1, 2, 3})), Error);
  EXPECT_THROW(w.set_grad(vec({1})), Error);
  EXPECT_THROW(Variable(Tensor::zeros(Shape{2}, DType::i32), true), Error);
}

TEST(Engine, LeafRootAccumulatesSeed) {
  Variable w(vec({5}), true, "w");
  int calls = 0;
  w.register_post_accumulate_hook([&](Variable&) { ++calls; });
  w.backward(2.0f);
  EXPECT_EQ(values(w.grad()), (std::vector<float>{2}));
  EXPECT_EQ(calls, 1);
}

TEST(GradMode, NoGradGuardRecordsNothingAndIsPerThread) {
  Variable w(vec({1, 2}), true, "w");
  {
    NoGradGuard guard;
    EXPECT_FALSE(grad_enabled());
    Variable y = mul(w, w);
    EXPECT_TRUE(y.is_leaf());
    EXPECT_FALSE(y.requires_grad());
    bool other_thread_enabled = false;
    std::thread t([&] { other_thread_enabled = grad_enabled(); });
    t.join();
    EXPECT_TRUE(other_thread_enabled);
    {
      GradModeGuard on(true);
      EXPECT_FALSE(mul(w, w).is_leaf());
    }
    EXPECT_FALSE(grad_enabled());
  }
  EXPECT_TRUE(grad_enabled());
}

TEST(Variable, DetachSharesValueWithoutHistory) {
  Variable w(vec({1, 2}), true, "w");
  Variable y = mul(w, w);
  Variable d = y.detach();
  EXPECT_TRUE(d.is_leaf());
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.value().shares_storage(y.value()));
}

}  // namespace
}  // namespace braid::autograd
