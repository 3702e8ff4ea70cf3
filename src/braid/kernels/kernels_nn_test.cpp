// The kernel harness, part 2: rope, flash attention, LM-head cross-entropy and the optimiser
// steps against their naive twins (see kernels_test.cpp for the conventions).
#include <cstring>
#include <utility>

#include "braid/kernels/kernels_test_util.h"
#include "braid/kernels/ops.h"
#include "braid/kernels/reference/reference.h"

namespace braid::kernels::test {
namespace {

namespace ref = braid::kernels::reference;

class NnOps : public KernelTest {};

TEST_P(NnOps, Rope) {
  Shape s{2, 7, 3, 16};
  for (int64_t pos0 : {int64_t{0}, int64_t{5}}) {
    Tensor x = rnd(s), out = Tensor::empty(s, dt()), out_r = out.clone();
    rope_forward(out, x, 10000.0f, pos0);
    ref::rope_forward(out_r, x, 10000.0f, pos0);
    EXPECT_TRUE(close(out, out_r, tol()));
    Tensor inplace = x.clone();
    rope_forward(inplace, inplace, 10000.0f, pos0);  // out may alias x
    EXPECT_TRUE(close(inplace, out_r, tol()));
    Tensor dout = rnd(s), dx = rnd(s), dx_r = dx.clone();
    rope_backward(dx, dout, 10000.0f, pos0);
    ref::rope_backward(dx_r, dout, 10000.0f, pos0);
    EXPECT_TRUE(close(dx, dx_r, tol()));
  }
}

struct AttnCase {
  int64_t B, T, NH, NKV, HS;
};

TEST_P(NnOps, Attention) {
  // T not a multiple of the 64-row tile, GQA 6/2, a single token, the GPT-2 head size, and a
  // head size over 64 (HS is widened 64 columns at a time).
  for (AttnCase c : {AttnCase{2, 70, 6, 2, 16}, AttnCase{1, 130, 2, 2, 64}, AttnCase{1, 1, 1, 1, 8},
                     AttnCase{2, 64, 4, 1, 32}, AttnCase{1, 33, 2, 1, 80}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << c.B << " T=" << c.T << " NH=" << c.NH
                                      << " NKV=" << c.NKV << " HS=" << c.HS);
    Shape qs{c.B, c.T, c.NH, c.HS}, ks{c.B, c.T, c.NKV, c.HS};
    Tensor q = rnd(qs), k = rnd(ks), v = rnd(ks);
    Tensor out = Tensor::empty(qs, dt()), out_r = out.clone();
    Tensor lse = Tensor::empty(Shape{c.B, c.NH, c.T}), lse_r = lse.clone();
    attention_forward(out, lse, q, k, v);
    ref::attention_forward(out_r, lse_r, q, k, v);
    EXPECT_TRUE(close(out, out_r, tol()));
    EXPECT_TRUE(close(lse, lse_r, 2e-5));
    Tensor dout = rnd(qs), dq = rnd(qs), dk = rnd(ks), dv = rnd(ks);
    Tensor dq_r = dq.clone(), dk_r = dk.clone(), dv_r = dv.clone();
    attention_backward(&dq, &dk, &dv, dout, q, k, v, out, lse);
    ref::attention_backward(&dq_r, &dk_r, &dv_r, dout, q, k, v, out_r, lse_r);
    EXPECT_TRUE(close(dq, dq_r, tol()));
    EXPECT_TRUE(close(dk, dk_r, tol()));
    EXPECT_TRUE(close(dv, dv_r, tol()));
  }
}

TEST_P(NnOps, LmHeadCrossEntropy) {
  // N = 300 rows: not a multiple of the row chunk; some rows ignored.
  const int64_t N = 300, C = 24, V = 257;
  Tensor x = rnd(Shape{N, C}), w = rnd(Shape{V, C}, 0.5f);
  Tensor tg = ids(Shape{N}, V);
  for (int64_t n = 0; n < N; n += 7) tg.data<int32_t>()[n] = -100;
  Tensor lse = Tensor::empty(Shape{N}), lse_r = lse.clone();
  int64_t count = -1, count_r = -2;
  double loss = lm_head_ce_forward(lse, &count, x, w, tg);
  double loss_r = ref::lm_head_ce_forward(lse_r, &count_r, x, w, tg);
  EXPECT_EQ(count, count_r);
  EXPECT_EQ(count, N - (N + 6) / 7);
  EXPECT_NEAR(loss, loss_r, (dt() == DType::f32 ? 1e-5 : 1e-2) * std::fabs(loss_r));
  EXPECT_TRUE(close(lse, lse_r, 2e-5));
  Tensor dx = rnd(Shape{N, C}), dw = rnd(Shape{V, C}), dx_r = dx.clone(), dw_r = dw.clone();
  float sc = 1.0f / static_cast<float>(count);
  lm_head_ce_backward(&dx, &dw, x, w, tg, lse, sc);
  ref::lm_head_ce_backward(&dx_r, &dw_r, x, w, tg, lse_r, sc);
  EXPECT_TRUE(close(dx, dx_r, tol()));
  EXPECT_TRUE(close(dw, dw_r, tol()));
  // Fused forward + backward: same loss, lse and (accumulated) gradients.
  Tensor lse2 = Tensor::empty(Shape{N});
  Tensor dx2 = rnd(Shape{N, C}), dw2 = rnd(Shape{V, C}), dx2_r = dx2.clone(), dw2_r = dw2.clone();
  int64_t count2 = -1;
  double loss2 = lm_head_ce_forward_backward(lse2, &count2, &dx2, &dw2, x, w, tg, sc);
  ref::lm_head_ce_forward_backward(lse_r, &count_r, &dx2_r, &dw2_r, x, w, tg, sc);
  EXPECT_EQ(count2, count);
  EXPECT_NEAR(loss2, loss_r, (dt() == DType::f32 ? 1e-5 : 1e-2) * std::fabs(loss_r));
  EXPECT_TRUE(close(lse2, lse_r, 2e-5));
  EXPECT_TRUE(close(dx2, dx2_r, tol()));
  EXPECT_TRUE(close(dw2, dw2_r, tol()));
  Tensor logits = Tensor::empty(Shape{N, V}), logits_r = logits.clone();
  lm_head_logits(logits, x, w);
  ref::lm_head_logits(logits_r, x, w);
  EXPECT_TRUE(close(logits, logits_r, 2e-5));
}

TEST_P(NnOps, LmHeadWeightGradientOverGroupsOfChunks) {
  // N = 2600 rows: bf16's weight gradient in three groups of up to 1024 rows (Note [Grouped
  // weight gradient], cpu/cross_entropy.cpp), the last short; fused and not.
  const int64_t N = 2600, C = 8, V = 40;
  Tensor x = rnd(Shape{N, C}), w = rnd(Shape{V, C}, 0.5f), tg = ids(Shape{N}, V);
  for (int64_t n = 0; n < N; n += 11) tg.data<int32_t>()[n] = -100;
  Tensor lse = Tensor::empty(Shape{N}), lse_r = lse.clone();
  int64_t count = -1, count_r = -2;
  lm_head_ce_forward(lse, &count, x, w, tg);
  ref::lm_head_ce_forward(lse_r, &count_r, x, w, tg);
  const float sc = 1.0f / static_cast<float>(count);
  Tensor dw = rnd(Shape{V, C}), dw_r = dw.clone(), dw2 = dw.clone(), dw2_r = dw.clone();
  lm_head_ce_backward(nullptr, &dw, x, w, tg, lse, sc);
  ref::lm_head_ce_backward(nullptr, &dw_r, x, w, tg, lse_r, sc);
  EXPECT_TRUE(close(dw, dw_r, tol()));
  lm_head_ce_forward_backward(lse, &count, nullptr, &dw2, x, w, tg, sc);
  ref::lm_head_ce_forward_backward(lse_r, &count_r, nullptr, &dw2_r, x, w, tg, sc);
  EXPECT_TRUE(close(dw2, dw2_r, tol()));
}

TEST_P(NnOps, LmHeadCrossEntropyPartial) {
  // Vocabulary rows [40, 64) of which 17 are real, N = 300 rows (more than one chunk), targets
  // below, inside and beyond the slice, some ignored; then a slice of padding only.
  const int64_t N = 300, C = 24, V = 57, v0 = 40, Vl = 24;
  Tensor x = rnd(Shape{N, C}), w = rnd(Shape{Vl, C}, 0.5f), tg = ids(Shape{N}, V);
  for (int64_t n = 0; n < N; n += 7) tg.data<int32_t>()[n] = -100;
  Tensor lse = Tensor::uniform(Shape{N}, rng_, 3.0f, 4.0f);  // a global lse from the combine
  for (int64_t valid : {V - v0, int64_t{0}}) {
    SCOPED_TRACE(::testing::Message() << "valid=" << valid);
    Tensor m = Tensor::empty(Shape{N}), s = m.clone(), tl = m.clone();
    Tensor m_r = m.clone(), s_r = m.clone(), tl_r = m.clone();
    lm_head_ce_partial_forward(m, s, tl, x, w, tg, v0, valid);
    ref::lm_head_ce_partial_forward(m_r, s_r, tl_r, x, w, tg, v0, valid);
    if (valid > 0) {
      EXPECT_TRUE(close(m, m_r, 2e-5));
    } else {  // max over no columns (all_close takes -inf - -inf = nan for a difference)
      for (float v : m.to_f32_vector()) EXPECT_EQ(v, -INFINITY);
      for (float v : m_r.to_f32_vector()) EXPECT_EQ(v, -INFINITY);
    }
    EXPECT_TRUE(close(s, s_r, 2e-5));
    EXPECT_TRUE(close(tl, tl_r, 2e-5));
    Tensor dx = rnd(Shape{N, C}), dw = rnd(Shape{Vl, C}), dx_r = dx.clone(), dw_r = dw.clone();
    lm_head_ce_partial_backward(&dx, &dw, x, w, tg, lse, 0.01f, v0, valid);
    ref::lm_head_ce_partial_backward(&dx_r, &dw_r, x, w, tg, lse, 0.01f, v0, valid);
    EXPECT_TRUE(close(dx, dx_r, tol()));
    EXPECT_TRUE(close(dw, dw_r, tol()));
  }
}

TEST_P(NnOps, AdamW) {
  // param f32; grad in the test's dtype.
  Shape s{1037};
  Tensor p = rnd_f32(s), g = rnd(s), m = rnd_f32(s, 0.1f), v = Tensor::uniform(s, rng_, 0, 0.1f);
  Tensor p_r = p.clone(), m_r = m.clone(), v_r = v.clone();
  for (int64_t t = 1; t <= 3; ++t) {
    adamw_step(p, g, m, v, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    ref::adamw_step(p_r, g, m_r, v_r, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
  }
  EXPECT_TRUE(close(p, p_r, 2e-5));
  EXPECT_TRUE(close(m, m_r, 2e-5));
  EXPECT_TRUE(close(v, v_r, 2e-5));
}

TEST_P(NnOps, AdamWWritingTheComputeCopyGivesTheStepAndTheCastsBits) {
  // Masters past bf16's and f16's range edges too: huge, tiny (f16 denormals), an f16 overflow.
  Shape s{1037};
  Tensor g = rnd(s), m0 = rnd_f32(s, 0.1f), v0 = Tensor::uniform(s, rng_, 0, 0.1f);
  Tensor p0 = rnd_f32(s);
  float* pp = p0.data<float>();
  pp[0] = 1e-6f;
  pp[1] = -3e-7f;
  pp[2] = 70000.0f;
  pp[3] = 3.0e38f;
  pp[4] = 65519.0f;
  for (DType cd : {DType::bf16, DType::f16}) {
    Tensor p = p0.clone(), m = m0.clone(), v = v0.clone(), c = Tensor::zeros(s, cd);
    Tensor p_r = p0.clone(), m_r = m0.clone(), v_r = v0.clone(), c_r = Tensor::zeros(s, cd);
    for (int64_t t = 1; t <= 2; ++t) {
      adamw_step(p, g, m, v, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t, c);
      adamw_step(p_r, g, m_r, v_r, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
      cast(c_r, p_r);
    }
    for (auto [a, b] : {std::pair{&p, &p_r}, {&m, &m_r}, {&v, &v_r}, {&c, &c_r}})
      EXPECT_EQ(std::memcmp(a->raw_data(), b->raw_data(), a->nbytes()), 0) << dtype_name(cd);
  }
  Tensor p = p0.clone(), m = m0.clone(), v = v0.clone(), wrong = Tensor::zeros(s);
  EXPECT_THROW(adamw_step(p, g, m, v, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, wrong), Error);
}

TEST_P(NnOps, Sgd) {
  Shape s{513};
  struct Case {
    float momentum, wd;
    bool nesterov;
  };
  for (Case c : {Case{0.0f, 0.0f, false}, Case{0.9f, 0.01f, false}, Case{0.9f, 0.01f, true}}) {
    Tensor p = rnd_f32(s), g = rnd(s), buf = Tensor::zeros(s), p_r = p.clone(), buf_r = buf;
    buf_r = buf.clone();
    Tensor none;
    for (int step = 0; step < 3; ++step) {
      sgd_step(p, g, c.momentum != 0 ? buf : none, 0.1f, c.momentum, c.wd, c.nesterov, step == 0);
      ref::sgd_step(p_r, g, c.momentum != 0 ? buf_r : none, 0.1f, c.momentum, c.wd, c.nesterov,
                    step == 0);
    }
    EXPECT_TRUE(close(p, p_r, 2e-5)) << "momentum " << c.momentum << " nesterov " << c.nesterov;
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, NnOps, float_dtypes(), dtype_param_name);

}  // namespace
}  // namespace braid::kernels::test
