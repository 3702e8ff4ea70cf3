// Every function of functions.h passes the shared finite-difference gradient check.
#include "braid/autograd/functions.h"

#include <gtest/gtest.h>

#include "testing/gradcheck.h"

namespace braid::autograd {
namespace {

using braid::testing::gradcheck;
using braid::testing::GradcheckOptions;
using V = std::vector<Variable>;

Tensor rnd(Shape s, uint64_t seed, float stddev = 1.0f) {
  Rng rng(seed);
  return Tensor::randn(s, rng, stddev);
}

// A deliberately wrong backward must fail the check (the checker is not vacuous).
class WrongDoubleNode : public Node {
 public:
  const char* name() const override { return "wrong_double"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    if (dinputs[0]) kernels_axpy(*dinputs[0], dout, 2.1f);  // should be 2
  }
  static void kernels_axpy(Tensor& y, const Tensor& x, float a) {
    for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] += a * x.data<float>()[i];
  }
};

TEST(Gradcheck, DetectsAWrongGradient) {
  auto f = [](const V& in) {
    Variable y = scale(in[0], 2.0f);
    if (!grad_enabled()) return y;
    auto node = std::make_shared<WrongDoubleNode>();
    node->inputs = {in[0]};
    return Variable::from_node(y.value(), node);
  };
  auto r = gradcheck(f, {rnd({3}, 1)});
  EXPECT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("analytic"), std::string::npos) << r.message();
}

TEST(Gradcheck, Linear) {
  auto f = [](const V& in) { return linear(in[0], in[1], in[2]); };
  EXPECT_TRUE(gradcheck(f, {rnd({2, 3, 4}, 1), rnd({5, 4}, 2, 0.5f), rnd({5}, 3)}));
  auto no_bias = [](const V& in) { return linear(in[0], in[1], Variable()); };
  EXPECT_TRUE(gradcheck(no_bias, {rnd({3, 4}, 4), rnd({2, 4}, 5)}));
  // Only the weight requires grad (a frozen input).
  EXPECT_TRUE(gradcheck(no_bias, {rnd({3, 4}, 4), rnd({2, 4}, 5)}, {.check_inputs = {1}}));
}

TEST(Gradcheck, Embedding) {
  Tensor ids = Tensor::from_vector<int32_t>({0, 4, 2, 2, 1, 4}, Shape{2, 3});
  auto f = [&](const V& in) { return embedding(ids, in[0], in[1]); };
  EXPECT_TRUE(gradcheck(f, {rnd({5, 4}, 1), rnd({4, 4}, 2)}));
  auto no_wpe = [&](const V& in) { return embedding(ids, in[0], Variable()); };
  EXPECT_TRUE(gradcheck(no_wpe, {rnd({5, 4}, 3)}));
}

TEST(Gradcheck, LayerNorm) {
  auto f = [](const V& in) { return layernorm(in[0], in[1], in[2], 1e-5f); };
  EXPECT_TRUE(gradcheck(f, {rnd({2, 3, 6}, 1), rnd({6}, 2), rnd({6}, 3)}));
}

TEST(Gradcheck, RmsNorm) {
  auto f = [](const V& in) { return rmsnorm(in[0], in[1], 1e-6f); };
  EXPECT_TRUE(gradcheck(f, {rnd({2, 3, 6}, 4), rnd({6}, 5)}));
}

TEST(Gradcheck, Gelu) {
  EXPECT_TRUE(gradcheck([](const V& in) { return gelu(in[0]); }, {rnd({3, 7}, 6, 2.0f)}));
}

TEST(Gradcheck, Swiglu) {
  auto f = [](const V& in) { return swiglu(in[0], in[1]); };
  EXPECT_TRUE(gradcheck(f, {rnd({2, 3, 5}, 7, 2.0f), rnd({2, 3, 5}, 8)}));
}

TEST(Gradcheck, Rope) {
  auto f = [](const V& in) { return rope(in[0], 10000.0f); };
  EXPECT_TRUE(gradcheck(f, {rnd({2, 5, 3, 4}, 9)}));
}

TEST(Gradcheck, AttentionGqa) {
  // NH = 4, NKV = 2, T = 5, HS = 4.
  auto f = [](const V& in) { return attention(in[0], in[1], in[2]); };
  EXPECT_TRUE(gradcheck(f, {rnd({2, 5, 4, 4}, 10), rnd({2, 5, 2, 4}, 11), rnd({2, 5, 2, 4}, 12)}));
}

TEST(Gradcheck, AttentionOverAPackedProjection) {
  // NH = 4, NKV = 2, T = 5, HS = 4: qkv [2, 5, (4 + 2 * 2) * 4].
  auto f = [](const V& in) { return attention_qkv(in[0], 4, 2); };
  EXPECT_TRUE(gradcheck(f, {rnd({2, 5, 32}, 30)}));
}

// attention_qkv is attention() on the projection's column slices, its gradient too, bit for bit
// (Note [Packed qkv]); the projection's gradient is a fresh buffer the node sets, or (used
// twice) one it adds into.
TEST(Functions, AttentionQkvIsAttentionOnTheSlicesBitForBit) {
  const int64_t B = 2, T = 70, NH = 4, NKV = 2, HS = 8, W = (NH + 2 * NKV) * HS;
  const Tensor dout = rnd({B, T, NH, HS}, 32);
  for (const bool twice : {false, true}) {
    Variable a(rnd({B, T, W}, 31), true, "a"), b(rnd({B, T, W}, 31), true, "b");
    auto head = [&](const Variable& x, int64_t start, int64_t n) {
      return reshape(slice_last_dim(x, start, n * HS), Shape{B, T, n, HS});
    };
    Variable packed = attention_qkv(a, NH, NKV);
    Variable split =
        attention(head(b, 0, NH), head(b, NH * HS, NKV), head(b, (NH + NKV) * HS, NKV));
    EXPECT_EQ(packed.value().to_f32_vector(), split.value().to_f32_vector());
    if (twice) {  // another consumer of the projection: its gradient is added into
      packed = add(packed, head(a, 0, NH));
      split = add(split, head(b, 0, NH));
    }
    packed.backward(dout);
    split.backward(dout);
    EXPECT_EQ(a.grad().to_f32_vector(), b.grad().to_f32_vector()) << "twice " << twice;
  }
}

TEST(Gradcheck, LmHeadCrossEntropyWithIgnoredTarget) {
  Tensor targets = Tensor::from_vector<int32_t>({3, -100, 0, 6, 2, 2}, Shape{2, 3});
  auto mean = [&](const V& in) { return lm_head_cross_entropy(in[0], in[1], targets); };
  EXPECT_TRUE(gradcheck(mean, {rnd({2, 3, 4}, 13), rnd({7, 4}, 14)}));
  auto over_global = [&](const V& in) {
    return lm_head_cross_entropy(in[0], in[1], targets, /*denominator=*/12.0);
  };
  EXPECT_TRUE(gradcheck(over_global, {rnd({2, 3, 4}, 13), rnd({7, 4}, 14)}));
}

TEST(LmHeadCrossEntropy, DenominatorDefaultsToCountedTargets) {
  Tensor targets = Tensor::from_vector<int32_t>({1, -100, 0}, Shape{3});
  Variable x(rnd({3, 4}, 1)), w(rnd({5, 4}, 2));
  float mean = lm_head_cross_entropy(x, w, targets).value().item();
  float sum = lm_head_cross_entropy(x, w, targets, 1.0).value().item();
  EXPECT_NEAR(mean, sum / 2, 1e-6);
  Tensor none = Tensor::from_vector<int32_t>({-100, -100, -100}, Shape{3});
  EXPECT_EQ(lm_head_cross_entropy(x, w, none).value().item(), 0.0f);
}

// Note [Fused LM head]: the weight's unit gradient is reused from step to step (Note [Recycled
// tensors]): each step must start it from zero, and it is charged only while a step holds it.
TEST(LmHeadCrossEntropy, RepeatedStepsGiveTheSameGradientsAndHoldNothingBetween) {
  // A weight of 64 MiB in f32, the least a pool keeps (smaller ones come from the heap).
  const int64_t V = 65536, C = 256;
  ASSERT_GE(static_cast<size_t>(V * C * 4), Storage::kLargeHostFrom);
  ASSERT_TRUE(fused_lm_head(V, C, /*on_device=*/false));
  auto tracker = std::make_shared<MemoryTracker>();
  MemoryScope scope(tracker);
  Tensor targets = Tensor::from_vector<int32_t>({3, -100, 0, 65535, 2, 2}, Shape{2, 3});
  Variable x(rnd({2, 3, C}, 13), true), w(rnd({V, C}, 14, 0.02f), true);
  std::vector<float> first_dw, first_dx;
  for (int step = 0; step < 2; ++step) {
    x.zero_grad();
    w.zero_grad();
    Variable loss = lm_head_cross_entropy(x, w, targets);
    EXPECT_GT(tracker->current(MemCategory::activations), V * C * 4);  // the unit gradient
    loss.backward();
    loss = Variable();
    EXPECT_EQ(tracker->current(MemCategory::activations), 0) << "step " << step;
    if (step == 0) {
      first_dw = w.grad().to_f32_vector(), first_dx = x.grad().to_f32_vector();
      continue;
    }
    EXPECT_EQ(w.grad().to_f32_vector(), first_dw) << "step " << step;
    EXPECT_EQ(x.grad().to_f32_vector(), first_dx) << "step " << step;
  }
  EXPECT_EQ(lm_head_buffers_kept(), 1u);  // this thread's pool keeps the weight gradient
  release_lm_head_buffers();
  EXPECT_EQ(lm_head_buffers_kept(), 0u);
}

TEST(Gradcheck, AddScaleSlice) {
  EXPECT_TRUE(
      gradcheck([](const V& in) { return add(in[0], in[1]); }, {rnd({2, 3}, 15), rnd({2, 3}, 16)}));
  EXPECT_TRUE(gradcheck([](const V& in) { return add(in[0], in[0]); }, {rnd({4}, 17)}));
  EXPECT_TRUE(gradcheck([](const V& in) { return scale(in[0], -1.5f); }, {rnd({2, 3}, 18)}));
  EXPECT_TRUE(
      gradcheck([](const V& in) { return slice_last_dim(in[0], 2, 3); }, {rnd({2, 2, 6}, 19)}));
}

TEST(Gradcheck, ReshapeOfLeafAndOfResult) {
  EXPECT_TRUE(gradcheck(
      [](const V& in) {
        return gelu(reshape(in[0], Shape{3, 2}));
      },
      {rnd({2, 3}, 20)}));
  // The reshaped value also used directly: the engine's handed-over buffer gets a second add.
  auto f = [](const V& in) {
    Variable h = scale(in[0], 2.0f);
    return add(gelu(reshape(h, Shape{6})), reshape(h, Shape{6}));
  };
  EXPECT_TRUE(gradcheck(f, {rnd({2, 3}, 21)}));
}

TEST(Gradcheck, BackwardHookAndCheckpoint) {
  int hook_calls = 0;
  auto f = [&](const V& in) {
    Variable w = in[1], b = in[2];
    auto block = [w, b](const Variable& x) { return gelu(linear(x, w, b)); };
    return backward_hook(checkpoint(block, scale(in[0], 1.0f)), [&] { ++hook_calls; });
  };
  EXPECT_TRUE(gradcheck(f, {rnd({2, 3}, 22), rnd({4, 3}, 23), rnd({4}, 24)}));
  EXPECT_EQ(hook_calls, 1);
}

// A pre-norm GPT-2 attention block: every function together, several consumers per value.
TEST(Gradcheck, AttentionBlock) {
  const int64_t B = 1, T = 3, NH = 2, HS = 2, C = NH * HS;
  auto f = [=](const V& in) {
    Variable x = in[0];
    Variable h = layernorm(x, in[1], in[2], 1e-5f);
    Variable qkv = linear(h, in[3], Variable());
    auto head = [&](int i) { return reshape(slice_last_dim(qkv, i * C, C), Shape{B, T, NH, HS}); };
    Variable y = attention(rope(head(0), 100.0f), rope(head(1), 100.0f), head(2));
    return add(x, linear(reshape(y, Shape{B, T, C}), in[4], Variable()));
  };
  EXPECT_TRUE(gradcheck(f, {rnd({B, T, C}, 25), rnd({C}, 26), rnd({C}, 27),
                            rnd({3 * C, C}, 28, 0.5f), rnd({C, C}, 29, 0.5f)}));
}

TEST(Functions, ShapeErrorsNameTheFunctionAndShapes) {
  Variable x(rnd({2, 4}, 1)), w(rnd({3, 5}, 2));
  try {
    linear(x, w, Variable());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("linear"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 4]"), std::string::npos) << m;
    EXPECT_NE(m.find("[3, 5]"), std::string::npos) << m;
  }
  Variable q(rnd({1, 5, 3, 4}, 3)), k(rnd({1, 5, 2, 4}, 4));
  EXPECT_THROW(attention(q, k, k), Error);  // NH % NKV != 0
  EXPECT_THROW(reshape(x, Shape{3, 3}), Error);
  EXPECT_THROW(slice_last_dim(x, 2, 3), Error);
}

TEST(Functions, NoGradRecordsNothingAndBackwardFreesActivations) {
  auto tracker = std::make_shared<MemoryTracker>();
  MemoryScope scope(tracker);
  Variable x(rnd({4, 8}, 1)), w(rnd({8, 8}, 2), true, "w");  // used twice (tied)
  Tensor targets = Tensor::from_vector<int32_t>({1, 2, 3, 4}, Shape{4});
  {
    NoGradGuard guard;
    EXPECT_TRUE(lm_head_cross_entropy(gelu(linear(x, w, Variable())), w, targets).is_leaf());
  }
  EXPECT_EQ(tracker->current(MemCategory::activations), 0);
  {
    Variable loss = lm_head_cross_entropy(gelu(linear(x, w, Variable())), w, targets);
    EXPECT_GT(tracker->current(MemCategory::activations), 4);
    loss.backward();
  }
  EXPECT_EQ(tracker->current(MemCategory::activations), 0);
  EXPECT_TRUE(w.grad().defined());
}

}  // namespace
}  // namespace braid::autograd

namespace braid::autograd {
namespace {

// bf16 values flow through the tape: gradient buffers take the value's dtype and the result
// is close to the f32 one.
TEST(Functions, Bf16TapeMatchesF32) {
  Tensor targets = Tensor::from_vector<int32_t>({1, 2, 0, 5, 3, 4}, Shape{2, 3});
  std::vector<std::vector<float>> dw;
  for (DType dt : {DType::f32, DType::bf16}) {
    Variable x(rnd({2, 3, 8}, 1).to(dt)), w1(rnd({8, 8}, 2, 0.3f).to(dt), true, "w1");
    Variable head(rnd({6, 8}, 3).to(dt));
    Variable h = rmsnorm(add(x, gelu(linear(x, w1, Variable()))),
                         Variable(Tensor::full({8}, 1.0, dt)), 1e-6f);
    lm_head_cross_entropy(h, head, targets).backward();
    EXPECT_EQ(w1.grad().dtype(), dt);
    dw.push_back(w1.grad().to_f32_vector());
  }
  for (size_t i = 0; i < dw[0].size(); ++i) EXPECT_NEAR(dw[1][i], dw[0][i], 2e-2) << i;
}

}  // namespace
}  // namespace braid::autograd

namespace braid::autograd {
namespace {

// A cast rounds in forward (to nearest even) and passes the gradient through in backward,
// converted back to the input's dtype: f32 -> bf16 -> x2 -> f16 -> f32.
TEST(Cast, RoundsForwardAndReturnsTheGradientInTheInputsDtype) {
  Rng rng(3);
  Variable x(Tensor::randn(Shape{3, 7}, rng, 1.0f), true, "x");
  x.zero_grad();
  Variable y = cast(scale(cast(cast(x, DType::bf16), DType::bf16), 2.0f), DType::f16);
  Variable z = cast(y, DType::f32);
  ASSERT_EQ(cast(x, DType::bf16).value().dtype(), DType::bf16);
  for (int64_t i = 0; i < 21; ++i) {
    const float rounded = bf16_bits_to_f32(f32_to_bf16_bits(x.value().data<float>()[i]));
    EXPECT_EQ(z.value().data<float>()[i], f16_bits_to_f32(f32_to_f16_bits(2.0f * rounded)));
  }
  Tensor dout = Tensor::full(Shape{3, 7}, 1.0f);
  z.backward(dout);
  ASSERT_EQ(x.grad().dtype(), DType::f32);
  for (int64_t i = 0; i < 21; ++i) EXPECT_EQ(x.grad().data<float>()[i], 2.0f);
  EXPECT_THROW(cast(x, DType::i32), Error);
}

}  // namespace
}  // namespace braid::autograd
