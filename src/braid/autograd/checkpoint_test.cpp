#include <gtest/gtest.h>

#include "braid/autograd/functions.h"
#include "braid/autograd/test_nodes.h"
#include "testing/tensor_compare.h"

namespace braid::autograd {
namespace {

using test::mul;
using test::sum;

struct Result {
  Tensor dx, dw;
  int64_t peak_activations;
  int hook_calls;
};

// Four blocks h_{k+1} = ((h_k * w_k) * w_k) * w_k, each optionally checkpointed, then
// loss = sum(h_4 * x), x = x0 * x0.
Result run(bool use_checkpoint) {
  auto tracker = std::make_shared<MemoryTracker>();
  MemoryScope scope(tracker);
  Rng rng(7);
  const int64_t n = 4096;
  std::vector<Variable> ws;
  Result r{};
  for (int k = 0; k < 4; ++k) {
    ws.emplace_back(Tensor::uniform(Shape{n}, rng, 0.5f, 1.5f), true, "w" + std::to_string(k));
    ws.back().register_post_accumulate_hook([&](Variable&) { ++r.hook_calls; });
  }
  Variable x0(Tensor::randn(Shape{n}, rng), true, "x0");
  tracker->reset_peaks();
  {
    Variable x = mul(x0, x0);
    Variable h = x;
    for (const Variable& w : ws) {
      auto block = [w](const Variable& v) { return mul(mul(mul(v, w), w), w); };
      h = use_checkpoint ? checkpoint(block, h) : block(h);
    }
    sum(mul(h, x)).backward();
  }
  r.peak_activations = tracker->peak(MemCategory::activations);
  EXPECT_EQ(tracker->current(MemCategory::activations), 0);
  r.dx = x0.grad();
  r.dw = ws[0].grad();
  return r;
}

TEST(Checkpoint, SameGradientsBitForBitWithLessActivationMemory) {
  Result plain = run(false);
  Result ckpt = run(true);
  EXPECT_TRUE(testing::bit_equal(ckpt.dx, plain.dx));
  EXPECT_TRUE(testing::bit_equal(ckpt.dw, plain.dw));
  EXPECT_EQ(plain.hook_calls, 4);  // once per parameter
  EXPECT_EQ(ckpt.hook_calls, 4);
  EXPECT_LT(ckpt.peak_activations, plain.peak_activations);
}

TEST(Checkpoint, InputWithoutGradStillGivesParameterGradients) {
  Variable w(test::vec({2, 3}), true, "w");
  Variable x(test::vec({5, 7}), false, "x");
  Variable y = checkpoint([&](const Variable& v) { return mul(v, w); }, x);
  sum(y).backward();
  EXPECT_EQ(w.grad().to_f32_vector(), (std::vector<float>{5, 7}));
}

TEST(Checkpoint, NoGradModeRecordsNothing) {
  Variable w(test::vec({2}), true, "w");
  NoGradGuard guard;
  Variable y = checkpoint([&](const Variable& v) { return mul(v, w); }, w);
  EXPECT_TRUE(y.is_leaf());
}

TEST(BackwardHook, CallsHookThenPassesGradientThrough) {
  Variable w(test::vec({2, 3}), true, "w");
  std::vector<std::string> events;
  w.register_post_accumulate_hook([&](Variable&) { events.push_back("w final"); });
  Variable h = backward_hook(mul(w, w), [&] { events.push_back("hook"); });
  sum(mul(h, h)).backward();  // d/dw w^4 = 4 w^3
  EXPECT_EQ(events, (std::vector<std::string>{"hook", "w final"}));
  EXPECT_EQ(w.grad().to_f32_vector(), (std::vector<float>{32, 108}));
}

TEST(BackwardHook, OnALeafAccumulatesIntoItsGrad) {
  Variable w(test::vec({2, 3}), true, "w");
  int calls = 0;
  Variable h = backward_hook(w, [&] { ++calls; });
  sum(mul(h, h)).backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(w.grad().to_f32_vector(), (std::vector<float>{4, 6}));
}

}  // namespace
}  // namespace braid::autograd
