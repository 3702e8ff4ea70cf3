#include "braid/optim/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "braid/kernels/ops.h"
#include "testing/tensor_compare.h"

namespace braid::optim {
namespace {

const std::vector<double> kP0 = {0.5, -1.25, 2.0, 0.0};
const std::vector<std::vector<double>> kGrads = {
    {0.1, -0.2, 0.3, 0.0}, {-0.4, 0.5, 0.05, 1.0}, {0.2, 0.2, -0.6, -0.3}};

Tensor f32(const std::vector<double>& v) {
  return Tensor::from_vector(std::vector<float>(v.begin(), v.end()),
                             Shape{static_cast<int64_t>(v.size())});
}

void expect_near_vec(const Tensor& t, const std::vector<double>& want) {
  auto got = t.to_f32_vector();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-6 + 1e-5 * std::fabs(want[i])) << "element " << i;
}

TEST(AdamW, ThreeStepsMatchTorchFormula) {
  const double lr = 0.01, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  Tensor p = f32(kP0), g = f32(kGrads[0]);
  ParamGroup group{{ParamSlice::whole("w", p, g)}, 1.0f, static_cast<float>(wd)};
  AdamW opt({group}, b1, b2, eps);
  std::vector<double> ep = kP0, m(4, 0), v(4, 0);
  for (int t = 1; t <= 3; ++t) {
    g.copy_(f32(kGrads[t - 1]));
    opt.step(static_cast<float>(lr));
    for (int i = 0; i < 4; ++i) {  // torch.optim.AdamW, float64
      double gi = kGrads[t - 1][i];
      ep[i] *= 1 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
      ep[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
    }
    expect_near_vec(p, ep);
  }
  EXPECT_EQ(opt.step_count(), 3);
  auto state = opt.state_tensors();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[0].first, "w.exp_avg");
  EXPECT_EQ(state[1].first, "w.exp_avg_sq");
  expect_near_vec(state[0].second, m);
  expect_near_vec(state[1].second, v);
  EXPECT_EQ(state[0].second.storage()->category(), MemCategory::optimizer_state);
}

void sgd_expectation(double momentum, bool nesterov) {
  const double lr = 0.1, wd = 0.01;
  Tensor p = f32(kP0), g = f32(kGrads[0]);
  SGD opt({ParamGroup{{ParamSlice::whole("w", p, g)}, 1.0f, static_cast<float>(wd)}},
          static_cast<float>(momentum), nesterov);
  std::vector<double> ep = kP0, buf(4, 0);
  for (int t = 1; t <= 3; ++t) {
    g.copy_(f32(kGrads[t - 1]));
    opt.step(static_cast<float>(lr));
    for (int i = 0; i < 4; ++i) {  // torch.optim.SGD, dampening 0, float64
      double d = kGrads[t - 1][i] + wd * ep[i];
      if (momentum != 0) {
        buf[i] = t == 1 ? d : momentum * buf[i] + d;
        d = nesterov ? d + momentum * buf[i] : buf[i];
      }
      ep[i] -= lr * d;
    }
    expect_near_vec(p, ep);
  }
}

TEST(SGD, ThreeStepsMatchTorchFormula) {
  sgd_expectation(0.0, false);
  sgd_expectation(0.9, false);
  sgd_expectation(0.9, true);
}

TEST(Optimizer, LrScaleAndFrozenSlices) {
  Tensor p1 = f32({1.0}), g1 = f32({1.0}), p2 = f32({1.0});
  SGD opt({ParamGroup{{ParamSlice::whole("a", p1, g1)}, 0.5f, 0.0f},
           ParamGroup{{ParamSlice::whole("b", p2, Tensor())}}});
  opt.step(0.2f);
  EXPECT_FLOAT_EQ(p1.item(), 1.0f - 0.1f);
  EXPECT_FLOAT_EQ(p2.item(), 1.0f);  // no gradient: skipped
}

TEST(Optimizer, SteppingAShardEqualsSteppingTheWholeBufferOnThatRange) {
  Rng rng(3);
  Tensor full_p = Tensor::randn(Shape{10}, rng), full_g = Tensor::randn(Shape{10}, rng);
  Tensor shard_p = full_p.clone(), shard_g = full_g.clone();
  AdamW whole({ParamGroup{{ParamSlice::whole("flat", full_p, full_g)}, 1.0f, 0.1f}});
  AdamW part(
      {ParamGroup{{ParamSlice::whole("flat", shard_p.flat_range(3, 4), shard_g.flat_range(3, 4))},
                  1.0f,
                  0.1f}});
  Tensor before = shard_p.clone();
  for (int i = 0; i < 3; ++i) {
    whole.step(1e-2f);
    part.step(1e-2f);
  }
  EXPECT_TRUE(testing::bit_equal(shard_p.flat_range(3, 4), full_p.flat_range(3, 4)));
  EXPECT_TRUE(testing::bit_equal(shard_p.flat_range(0, 3), before.flat_range(0, 3)));
  EXPECT_TRUE(testing::bit_equal(shard_p.flat_range(7, 3), before.flat_range(7, 3)));
}

// Note [Compute copy in the step]: a slice's compute copy follows its masters through a step
// (AdamW's fused pass, SGD's cast after it) and a visit that writes them; frozen slices keep
// theirs; the masters are the bits of a step without a copy.
TEST(Optimizer, ComputeCopiesFollowTheMastersThroughStepsAndWritingVisits) {
  Rng rng(5);
  for (int which = 0; which < 2; ++which) {
    Tensor p = Tensor::randn(Shape{300}, rng), g = Tensor::randn(Shape{300}, rng);
    Tensor plain = p.clone(), frozen = Tensor::randn(Shape{7}, rng);
    Tensor copy = Tensor::zeros(Shape{300}, which == 0 ? DType::bf16 : DType::f16);
    Tensor frozen_copy = Tensor::zeros(Shape{7}, DType::bf16);
    ParamSlice s = ParamSlice::whole("w", p, g), f = ParamSlice::whole("f", frozen, Tensor());
    s.compute = copy;
    f.compute = frozen_copy;
    auto make = [&](std::vector<ParamSlice> slices) -> std::unique_ptr<Optimizer> {
      if (which == 0) return std::make_unique<AdamW>(std::vector{ParamGroup{slices, 1.0f, 0.1f}});
      return std::make_unique<SGD>(std::vector{ParamGroup{slices, 1.0f, 0.1f}}, 0.9f, false);
    };
    auto with = make({s, f});
    auto without = make({ParamSlice::whole("w", plain, g)});
    for (int i = 0; i < 2; ++i) {
      with->step(1e-2f);
      without->step(1e-2f);
    }
    EXPECT_TRUE(testing::bit_equal(p, plain)) << with->name();
    Tensor expected = Tensor::zeros(Shape{300}, copy.dtype());
    kernels::cast(expected, p);
    EXPECT_TRUE(testing::bit_equal(copy, expected)) << with->name();
    EXPECT_TRUE(testing::bit_equal(frozen_copy, Tensor::zeros(Shape{7}, DType::bf16)));
    // A checkpoint's load writes the masters through a visit: the copies follow.
    with->visit_slices([](const ParamSlice&, SliceSlot& slot) { slot.param.fill_(0.75); }, true);
    Tensor three_quarters = Tensor::full(Shape{300}, 0.75f);
    kernels::cast(expected, three_quarters);
    EXPECT_TRUE(testing::bit_equal(copy, expected)) << with->name();
    EXPECT_EQ(frozen_copy.to_f32_vector()[0], 0.75f);
  }
}

TEST(Optimizer, StateRestoresBitExactly) {
  for (int which = 0; which < 2; ++which) {
    Tensor p = f32(kP0), g = f32(kGrads[0]);
    auto make = [&](Tensor param) -> std::unique_ptr<Optimizer> {
      std::vector<ParamGroup> groups{ParamGroup{{ParamSlice::whole("w", param, g)}, 1.0f, 0.05f}};
      if (which == 0) return std::make_unique<AdamW>(groups);
      return std::make_unique<SGD>(groups, 0.9f, false);
    };
    auto a = make(p);
    a->step(0.01f);
    a->step(0.01f);
    // Save: parameters, state tensors, step count.
    Tensor saved_p = p.clone();
    std::vector<Tensor> saved;
    for (auto& [name, t] : a->state_tensors()) saved.push_back(t.clone());
    int64_t saved_step = a->step_count();
    a->step(0.01f);
    // Restore into a fresh optimizer and take the same third step.
    Tensor q = saved_p.clone();
    auto b = make(q);
    auto state = b->state_tensors();
    ASSERT_EQ(state.size(), saved.size());
    for (size_t i = 0; i < saved.size(); ++i) state[i].second.copy_(saved[i]);
    b->set_step_count(saved_step);
    b->step(0.01f);
    EXPECT_TRUE(testing::bit_equal(q, p)) << a->name();
  }
}

TEST(Optimizer, RejectsMismatchedSlices) {
  EXPECT_THROW(AdamW({ParamGroup{{ParamSlice::whole("w", f32({1, 2}), f32({1}))}}}), Error);
  EXPECT_THROW(AdamW({ParamGroup{{ParamSlice::whole("w", f32({1}).to(DType::bf16), f32({1}))}}}),
               Error);
  ParamSlice wrong_record = ParamSlice::whole("w", f32({1, 2}), f32({1, 2}));
  wrong_record.shard.numel = 3;
  EXPECT_THROW(AdamW({ParamGroup{{wrong_record}}}), Error);
}

}  // namespace
}  // namespace braid::optim

namespace braid::optim {
namespace {

// A store that keeps state in its own buffers, visits slices backwards and copies the master
// weights in and out around each update, as an offloading store does: same bits as in memory.
class CopyingStore : public StateStore {
 public:
  void attach(const std::vector<const ParamSlice*>& slices, int num_states) override {
    slices_ = slices;
    num_slices_ = slices.size();
    for (const ParamSlice* s : slices) {
      std::vector<Tensor> st;
      for (int k = 0; k < num_states; ++k) st.push_back(Tensor::zeros(s->param.shape()));
      state_.push_back(st);
    }
  }
  std::vector<size_t> step_order() const override {
    std::vector<size_t> o = StateStore::step_order();
    return {o.rbegin(), o.rend()};
  }
  SliceSlot acquire(size_t i) override {
    ++acquired;
    return {slices_[i]->param.clone(), state_[i], Tensor()};
  }
  void release(size_t i) override { ++released, last_ = i; }
  std::vector<Tensor> resident_state(size_t i) override { return state_[i]; }
  void visit(const std::function<void(size_t, SliceSlot&)>& fn, bool) override {
    for (size_t i = 0; i < slices_.size(); ++i) {
      SliceSlot slot{slices_[i]->param, state_[i], Tensor()};
      fn(i, slot);
    }
  }
  int acquired = 0, released = 0;
  size_t last_ = 99;

 private:
  std::vector<const ParamSlice*> slices_;
  std::vector<std::vector<Tensor>> state_;
};

TEST(StateStore, AnotherStoreVisitsInItsOrderAndUpdatesTheSlotItHandsOut) {
  Rng rng(5);
  Tensor p1 = Tensor::randn(Shape{6}, rng), g1 = Tensor::randn(Shape{6}, rng);
  Tensor p2 = Tensor::randn(Shape{3}, rng), g2 = Tensor::randn(Shape{3}, rng);
  Tensor q1 = p1.clone(), q2 = p2.clone();
  AdamW resident(
      {ParamGroup{{ParamSlice::whole("a", p1, g1), ParamSlice::whole("b", p2, g2)}, 1.0f, 0.1f}});
  AdamW other(
      {ParamGroup{{ParamSlice::whole("a", q1, g1), ParamSlice::whole("b", q2, g2)}, 1.0f, 0.1f}});
  auto store = std::make_unique<CopyingStore>();
  CopyingStore* s = store.get();
  other.set_state_store(std::move(store));
  resident.step(1e-2f);
  other.step(1e-2f);
  EXPECT_EQ(s->acquired, 2);
  EXPECT_EQ(s->released, 2);
  EXPECT_EQ(s->last_, 0u);  // visited backwards
  // The store's own copies of the weights were updated, not the slices' tensors ...
  EXPECT_FALSE(testing::bit_equal(q1, p1));
  // ... and the state matches the resident optimizer's bit for bit.
  auto a = resident.state_tensors(), b = other.state_tensors();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(testing::bit_equal(a[i].second, b[i].second)) << a[i].first;
  }
  EXPECT_THROW(other.set_state_store(std::make_unique<ResidentStateStore>()), Error);
}

}  // namespace
}  // namespace braid::optim
