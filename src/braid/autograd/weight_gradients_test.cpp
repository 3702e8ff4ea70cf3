// The split backward (Note [Split backward]): pass B (backward_inputs) then pass W
// (WeightGradients::run) give every gradient of one backward bit for bit, with the input leaf's
// gradient already final after B, the parameters' only after W, hooks fired in W, and the same
// under gradient accumulation (in either order of the passes), a tied embedding and
// activation checkpointing.
#include "braid/autograd/weight_gradients.h"

#include <gtest/gtest.h>

#include <vector>

#include "braid/autograd/functions.h"

namespace braid::autograd {
namespace {

constexpr int64_t kB = 2, kT = 5, kC = 8, kV = 11;

Tensor rnd(Shape s, uint64_t seed, float stddev = 0.5f) {
  Rng rng(seed);
  return Tensor::randn(s, rng, stddev);
}

Tensor ids(uint64_t seed) {
  std::vector<int32_t> v;
  for (int64_t i = 0; i < kB * kT; ++i)
    v.push_back(static_cast<int32_t>((seed * 7 + static_cast<uint64_t>(i) * 3) % kV));
  return Tensor::from_vector(v, Shape{kB, kT});
}

// A two-stage toy language model with a tied table: stage 0 embeds, stage 1 takes the
// activations as a leaf (as a pipeline stage does) and ends in the tied LM head's loss.
struct Toy {
  Variable wte{rnd({kV, kC}, 1), true, "wte"}, wpe{rnd({kT, kC}, 2), true, "wpe"};
  Variable ln_w{rnd({kC}, 3), true, "ln_w"}, ln_b{rnd({kC}, 4), true, "ln_b"};
  Variable w1{rnd({2 * kC, kC}, 5), true, "w1"}, b1{rnd({2 * kC}, 6), true, "b1"};
  Variable w2{rnd({kC, 2 * kC}, 7), true, "w2"}, b2{rnd({kC}, 8), true, "b2"};
  Variable w3{rnd({kC, kC}, 9), true, "w3"};
  bool checkpointed = false;

  std::vector<Variable> params() const { return {wte, wpe, ln_w, ln_b, w1, b1, w2, b2, w3}; }
  void zero_grad() {
    for (Variable p : params()) p.zero_grad();
  }
  Variable stage0(const Tensor& x_ids) const { return embedding(x_ids, wte, wpe); }
  Variable stage1(const Variable& x, const Tensor& targets) const {
    auto block = [this](const Variable& h) {
      Variable y = linear(gelu(linear(layernorm(h, ln_w, ln_b, 1e-5f), w1, b1)), w2, b2);
      return add(h, linear(y, w3, Variable()));
    };
    Variable h = checkpointed ? checkpoint(block, x) : block(x);
    return lm_head_cross_entropy(h, wte, targets);
  }
};

std::vector<std::vector<float>> grads(const Toy& m) {
  std::vector<std::vector<float>> out;
  for (const Variable& p : m.params()) out.push_back(p.grad().to_f32_vector());
  return out;
}

// Both stages' backward for micro-batches 0..n-1: plain, or split with the W passes in `order`
// (a permutation-free lag: every B first when lag, else B0 W0 B1 W1 ...).
std::vector<std::vector<float>> train(bool checkpointed, bool split, int micro, bool lag) {
  Toy m;
  m.checkpointed = checkpointed;
  m.zero_grad();
  std::vector<WeightGradients> w0(static_cast<size_t>(micro)), w1(static_cast<size_t>(micro));
  for (int k = 0; k < micro; ++k) {
    Variable x0 = m.stage0(ids(static_cast<uint64_t>(k)));
    Variable x1(x0.value(), true, "x");  // the received activations
    x1.zero_grad();
    Variable loss = m.stage1(x1, ids(static_cast<uint64_t>(k + 10)).flatten());
    if (!split) {
      loss.backward();
      x0.backward(x1.grad());
      continue;
    }
    const size_t i = static_cast<size_t>(k);
    Tensor seed = Tensor::full(Shape{1}, 1.0);
    backward_inputs(loss, seed, {x1}, w1[i]);
    backward_inputs(x0, x1.grad(), {}, w0[i]);
    EXPECT_FALSE(w1[i].empty());
    EXPECT_FALSE(w0[i].empty());
    if (!lag) {
      w1[i].run();
      w0[i].run();
    }
  }
  if (lag)
    for (size_t i = 0; i < static_cast<size_t>(micro); ++i) {
      w1[i].run();
      w0[i].run();
    }
  return grads(m);
}

TEST(WeightGradients, BThenWIsOneBackwardBitForBit) {
  for (bool checkpointed : {false, true})
    for (int micro : {1, 3})
      for (bool lag : {false, true})
        EXPECT_EQ(train(checkpointed, true, micro, lag), train(checkpointed, false, micro, false))
            << "checkpointed " << checkpointed << ", micro-batches " << micro << ", lag " << lag;
}

TEST(WeightGradients, InputGradientNowParameterGradientsAndHooksInW) {
  for (bool checkpointed : {false, true}) {
    Toy plain, m;
    plain.checkpointed = m.checkpointed = checkpointed;
    plain.zero_grad();
    m.zero_grad();
    const Tensor x_value = rnd({kB, kT, kC}, 20);
    const Tensor targets = ids(3).flatten();
    Variable xp(x_value, true, "x");
    xp.zero_grad();
    plain.stage1(xp, targets).backward();

    int hooks = 0;
    for (Variable p : m.params()) p.register_post_accumulate_hook([&](Variable&) { ++hooks; });
    Variable x(x_value, true, "x");
    x.zero_grad();
    WeightGradients w;
    backward_inputs(m.stage1(x, targets), Tensor::full(Shape{1}, 1.0), {x}, w);
    EXPECT_EQ(x.grad().to_f32_vector(), xp.grad().to_f32_vector());
    EXPECT_EQ(hooks, 0);
    // Every weight waits for W.
    for (const Variable& p : {m.wte, m.ln_w, m.ln_b, m.w1, m.b1, m.w2, m.b2, m.w3})
      for (float g : p.grad().to_f32_vector()) ASSERT_EQ(g, 0.0f) << p.name();
    EXPECT_GE(w.size(), 4u);
    w.run();
    EXPECT_TRUE(w.empty());
    EXPECT_EQ(hooks, 8);  // every parameter of stage 1 (wpe is stage 0's), once
    EXPECT_EQ(grads(m), grads(plain)) << "checkpointed " << checkpointed;
  }
}

TEST(WeightGradients, NestedSplitIsAnError) {
  Variable w(rnd({kC, kC}, 1), true, "w");
  w.zero_grad();
  Variable x(rnd({2, kC}, 2), true, "x");
  x.zero_grad();
  WeightGradients outer;
  Variable y = linear(x, w, Variable());
  Variable z = backward_hook(y, [&] {
    WeightGradients inner;
    backward_inputs(linear(x, w, Variable()), rnd({2, kC}, 3), {x}, inner);
  });
  EXPECT_THROW(backward_inputs(z, rnd({2, kC}, 4), {x}, outer), Error);
}

}  // namespace
}  // namespace braid::autograd
