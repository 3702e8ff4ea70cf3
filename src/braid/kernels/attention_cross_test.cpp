// The kernels ring attention (context parallelism) runs on: attention of Tq queries against a
// separate block of Tk keys with no mask, the per-key-block backward of Note [Attention over
// key blocks] (ops.h), rope at given positions, and the scratch those attentions reserve.
//   - non-causal attention against the reference: Tq != Tk, neither a multiple of the tile;
//   - the ring identity: a causal attention's last 128 queries over 256 keys, done as a
//     non-causal block [0,128) and a causal block [128,256), merged, equals the whole one,
//     and the blocks' backward with the merged out/lse gives its gradients;
//   - rope with positions pos0..pos0+T-1 is bit-identical to rope at pos0, and two runs of
//     positions equal two calls on the halves;
//   - ScratchPlan's attention requests equal what the kernels take for Tq != Tk.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/memory_tracker.h"
#include "braid/kernels/kernels_test_util.h"
#include "braid/kernels/ops.h"
#include "braid/kernels/reference/reference.h"
#include "braid/kernels/scratch_plan.h"

namespace braid::kernels::test {
namespace {

namespace ref = braid::kernels::reference;

// x[..., T, ...] -> a copy of indices [t0, t1) of dimension dim.
Tensor slice(const Tensor& x, int dim, int64_t t0, int64_t t1) {
  std::vector<int64_t> s = x.shape().vec();
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < dim; ++i) outer *= s[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(dim) + 1; i < s.size(); ++i) inner *= s[i];
  const int64_t T = s[static_cast<size_t>(dim)], es = static_cast<int64_t>(dtype_size(x.dtype()));
  s[static_cast<size_t>(dim)] = t1 - t0;
  Tensor y = Tensor::empty(Shape(s), x.dtype());
  const auto* src = static_cast<const char*>(x.raw_data());
  auto* dst = static_cast<char*>(y.raw_data());
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + o * (t1 - t0) * inner * es, src + (o * T + t0) * inner * es,
                static_cast<size_t>((t1 - t0) * inner * es));
  return y;
}

Tensor positions_of(const std::vector<int32_t>& p) {
  return Tensor::from_vector<int32_t>(p, Shape{static_cast<int64_t>(p.size())});
}

class AttentionCross : public KernelTest {};

struct CrossCase {
  int64_t Tq, Tk, HS;
};

TEST_P(AttentionCross, NonCausalMatchesReference) {
  // B = 2, GQA 4/2; Tq < Tk, Tq > Tk and equal, none or one a multiple of the 64-row tile, a
  // single query, a single key, and head sizes under, at and over 64.
  const int64_t B = 2, NH = 4, NKV = 2;
  for (CrossCase c : {CrossCase{40, 100, 16}, CrossCase{128, 64, 32}, CrossCase{70, 70, 16},
                      CrossCase{1, 130, 64}, CrossCase{100, 40, 80}, CrossCase{65, 1, 8}}) {
    SCOPED_TRACE(::testing::Message() << "Tq=" << c.Tq << " Tk=" << c.Tk << " HS=" << c.HS);
    Shape qs{B, c.Tq, NH, c.HS}, ks{B, c.Tk, NKV, c.HS};
    Tensor q = rnd(qs), k = rnd(ks), v = rnd(ks);
    Tensor out = Tensor::empty(qs, dt()), out_r = out.clone();
    Tensor lse = Tensor::empty(Shape{B, NH, c.Tq}), lse_r = lse.clone();
    attention_forward(out, lse, q, k, v, /*causal=*/false);
    ref::attention_forward(out_r, lse_r, q, k, v, /*causal=*/false);
    EXPECT_TRUE(close(out, out_r, tol()));
    EXPECT_TRUE(close(lse, lse_r, 2e-5));
    Tensor dout = rnd(qs), dq = rnd(qs), dk = rnd(ks), dv = rnd(ks);
    Tensor dq_r = dq.clone(), dk_r = dk.clone(), dv_r = dv.clone();
    attention_backward(&dq, &dk, &dv, dout, q, k, v, out, lse, /*causal=*/false);
    ref::attention_backward(&dq_r, &dk_r, &dv_r, dout, q, k, v, out_r, lse_r, /*causal=*/false);
    EXPECT_TRUE(close(dq, dq_r, tol()));
    EXPECT_TRUE(close(dk, dk_r, tol()));
    EXPECT_TRUE(close(dv, dv_r, tol()));
  }
}

TEST_P(AttentionCross, RopePositionsMatchPos0BitForBit) {
  const Shape s{2, 9, 3, 16};
  for (int32_t pos0 : {0, 5}) {
    std::vector<int32_t> p(9);
    for (int32_t t = 0; t < 9; ++t) p[static_cast<size_t>(t)] = pos0 + t;
    const Tensor pos = positions_of(p);
    Tensor x = rnd(s), out = Tensor::empty(s, dt()), out_p = out.clone();
    rope_forward(out, x, 10000.0f, pos0);
    rope_forward(out_p, x, 10000.0f, pos);
    EXPECT_TRUE(braid::testing::bit_equal(out_p, out));
    Tensor dout = rnd(s), dx = rnd(s), dx_p = dx.clone();
    rope_backward(dx, dout, 10000.0f, pos0);
    rope_backward(dx_p, dout, 10000.0f, pos);
    EXPECT_TRUE(braid::testing::bit_equal(dx_p, dx));
  }
}

TEST_P(AttentionCross, RopeTwoRunsOfPositionsEqualTwoCalls) {
  // A zig-zag shard: rows 0..4 at positions 0..4, rows 5..9 at 15..19.
  const Shape s{2, 10, 3, 16};
  const Tensor pos = positions_of({0, 1, 2, 3, 4, 15, 16, 17, 18, 19});
  Tensor x = rnd(s), out = Tensor::empty(s, dt()), out_r = out.clone();
  rope_forward(out, x, 10000.0f, pos);
  for (auto [t0, t1, pos0] : {std::tuple{0, 5, 0}, std::tuple{5, 10, 15}}) {
    Tensor half = slice(x, 1, t0, t1), out_h = Tensor::empty(half.shape(), dt());
    rope_forward(out_h, half, 10000.0f, pos0);
    EXPECT_TRUE(braid::testing::bit_equal(slice(out, 1, t0, t1), out_h)) << "rows " << t0;
  }
  ref::rope_forward(out_r, x, 10000.0f, pos);
  EXPECT_TRUE(close(out, out_r, tol()));

  Tensor dout = rnd(s), dx = rnd(s), dx_r = dx.clone();
  rope_backward(dx, dout, 10000.0f, pos);
  for (auto [t0, t1, pos0] : {std::tuple{0, 5, 0}, std::tuple{5, 10, 15}}) {
    Tensor dx_h = slice(dx_r, 1, t0, t1);  // dx's starting value on these rows
    rope_backward(dx_h, slice(dout, 1, t0, t1), 10000.0f, pos0);
    EXPECT_TRUE(braid::testing::bit_equal(slice(dx, 1, t0, t1), dx_h)) << "rows " << t0;
  }
  ref::rope_backward(dx_r, dout, 10000.0f, pos);
  EXPECT_TRUE(close(dx, dx_r, tol()));
}

// Runs on a fresh thread, so its scratch starts empty: the kernels' scratch after a sequence
// of attentions is what ScratchPlan replays for the same sequence.
TEST_P(AttentionCross, ScratchPlanMatchesTheKernels) {
  const int64_t B = 1, NH = 2, NKV = 1, HS = 48;
  const DType dtype = dt();
  struct Call {
    int64_t Tq, Tk;
    bool causal;
  };
  const std::vector<Call> calls = {{70, 70, true}, {40, 200, false}, {300, 40, false}};
  auto tracker = std::make_shared<MemoryTracker>();
  int64_t taken = -1;
  std::thread t([&] {
    MemoryScope scope(tracker);
    Rng rng(test_seed());
    for (const Call& c : calls) {
      Shape qs{B, c.Tq, NH, HS}, ks{B, c.Tk, NKV, HS};
      Tensor q = Tensor::randn(qs, rng, 1.0f, dtype), k = Tensor::randn(ks, rng, 1.0f, dtype);
      Tensor v = Tensor::randn(ks, rng, 1.0f, dtype), out = Tensor::empty(qs, dtype);
      Tensor lse = Tensor::empty(Shape{B, NH, c.Tq}), dq = Tensor::zeros(qs, dtype);
      attention_forward(out, lse, q, k, v, c.causal);
      attention_backward(&dq, nullptr, nullptr, out, q, k, v, out, lse, c.causal);
    }
    taken = tracker->current(MemCategory::scratch);
  });
  t.join();
  ScratchPlan plan(omp_get_max_threads());
  for (const Call& c : calls) {
    plan.attention_forward(c.Tq, c.Tk, HS, dtype);
    plan.attention_backward(c.Tq, c.Tk, HS, dtype);
  }
  EXPECT_EQ(taken, plan.bytes());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AttentionCross, float_dtypes(), dtype_param_name);

// o, l = o1, l1 merged with o2, l2 (Note [Attention over key blocks]): l = log(e^l1 + e^l2)
// computed from the larger, o = o1 e^(l1 - l) + o2 e^(l2 - l). f32 [B,T,NH,HS] and [B,NH,T].
void merge(Tensor& o, Tensor& l, const Tensor& o1, const Tensor& l1, const Tensor& o2,
           const Tensor& l2) {
  const int64_t B = o.size(0), T = o.size(1), NH = o.size(2), HS = o.size(3);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t li = (b * NH + h) * T + t;
        const double a = l1.data<float>()[li], c = l2.data<float>()[li], mx = std::max(a, c);
        const double lse = mx + std::log(std::exp(a - mx) + std::exp(c - mx));
        l.data<float>()[li] = static_cast<float>(lse);
        const double w1 = std::exp(a - lse), w2 = std::exp(c - lse);
        for (int64_t x = 0; x < HS; ++x) {
          const int64_t oi = ((b * T + t) * NH + h) * HS + x;
          o.data<float>()[oi] =
              static_cast<float>(w1 * o1.data<float>()[oi] + w2 * o2.data<float>()[oi]);
        }
      }
}

// |a - b| <= tol (1 + |b|) element-wise.
::testing::AssertionResult within(const Tensor& actual, const Tensor& expected, double tol) {
  return braid::testing::all_close(actual, expected, tol, tol);
}

TEST(AttentionRing, TwoKeyBlocksEqualTheWholeCausalAttention) {
  const int64_t B = 2, T = 256, H = 128, NH = 4, NKV = 2, HS = 32;
  Rng rng(test_seed());
  const Shape qs{B, T, NH, HS}, ks{B, T, NKV, HS}, hq{B, H, NH, HS}, hk{B, H, NKV, HS};
  Tensor q = Tensor::randn(qs, rng), k = Tensor::randn(ks, rng), v = Tensor::randn(ks, rng);
  Tensor out = Tensor::empty(qs), lse = Tensor::empty(Shape{B, NH, T});
  attention_forward(out, lse, q, k, v);

  // The second half's queries: keys [0, H) all visible, keys [H, T) causal.
  const Tensor q2 = slice(q, 1, H, T);
  const Tensor k1 = slice(k, 1, 0, H), v1 = slice(v, 1, 0, H);
  const Tensor k2 = slice(k, 1, H, T), v2 = slice(v, 1, H, T);
  Tensor o1 = Tensor::empty(hq), o2 = Tensor::empty(hq), om = Tensor::empty(hq);
  Tensor l1 = Tensor::empty(Shape{B, NH, H}), l2 = l1.clone(), lm = l1.clone();
  attention_forward(o1, l1, q2, k1, v1, /*causal=*/false);
  attention_forward(o2, l2, q2, k2, v2, /*causal=*/true);
  merge(om, lm, o1, l1, o2, l2);
  EXPECT_TRUE(within(om, slice(out, 1, H, T), 1e-5));
  EXPECT_TRUE(within(lm, slice(lse, 2, H, T), 1e-5));

  // dout zero on the first half's rows, so the whole backward is the second half's share.
  Tensor dout = Tensor::randn(qs, rng);
  for (int64_t b = 0; b < B; ++b)
    std::memset(dout.data<float>() + b * T * NH * HS, 0, sizeof(float) * H * NH * HS);
  Tensor dq = Tensor::zeros(qs), dk = Tensor::zeros(ks), dv = Tensor::zeros(ks);
  attention_backward(&dq, &dk, &dv, dout, q, k, v, out, lse);

  const Tensor dout2 = slice(dout, 1, H, T);
  Tensor dq2 = Tensor::zeros(hq), dk1 = Tensor::zeros(hk), dv1 = Tensor::zeros(hk);
  Tensor dk2 = Tensor::zeros(hk), dv2 = Tensor::zeros(hk);
  attention_backward(&dq2, &dk1, &dv1, dout2, q2, k1, v1, om, lm, /*causal=*/false);
  attention_backward(&dq2, &dk2, &dv2, dout2, q2, k2, v2, om, lm, /*causal=*/true);
  EXPECT_TRUE(within(dq2, slice(dq, 1, H, T), 1e-4));
  EXPECT_TRUE(within(dk1, slice(dk, 1, 0, H), 1e-4));
  EXPECT_TRUE(within(dk2, slice(dk, 1, H, T), 1e-4));
  EXPECT_TRUE(within(dv1, slice(dv, 1, 0, H), 1e-4));
  EXPECT_TRUE(within(dv2, slice(dv, 1, H, T), 1e-4));
}

template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << msg << "\n  missing: " << p;
  }
}

TEST(AttentionCrossErrors, CausalNeedsAsManyKeysAsQueries) {
  Tensor q = Tensor::zeros(Shape{1, 8, 2, 4}), k = Tensor::zeros(Shape{1, 6, 2, 4});
  Tensor out = Tensor::empty(q.shape()), lse = Tensor::empty(Shape{1, 2, 8});
  expect_error([&] { attention_forward(out, lse, q, k, k); },
               {"attention_forward", "[1, 6, 2, 4]", "[1, 8, 2, 4]", "causal"});
  attention_forward(out, lse, q, k, k, /*causal=*/false);  // fine without the mask
  Tensor bad_lse = Tensor::empty(Shape{1, 2, 6});
  expect_error([&] { attention_backward(&q, nullptr, nullptr, q, q, k, k, out, bad_lse, false); },
               {"attention_backward", "lse"});
}

TEST(AttentionCrossErrors, RopePositionsChecked) {
  Tensor x = Tensor::zeros(Shape{1, 4, 2, 8}), out = Tensor::empty(x.shape());
  expect_error(
      [&] {
        rope_forward(out, x, 10000.0f, positions_of({0, 1, 2}));
      },
      {"rope_forward", "positions"});
  expect_error([&] { rope_forward(out, x, 10000.0f, Tensor::zeros(Shape{4})); },
               {"rope_forward", "positions"});
  expect_error(
      [&] {
        rope_backward(out, x, 10000.0f, positions_of({0, 1, 2, -3}));
      },
      {"rope_backward", "positions[3]", "-3"});
}

}  // namespace
}  // namespace braid::kernels::test
