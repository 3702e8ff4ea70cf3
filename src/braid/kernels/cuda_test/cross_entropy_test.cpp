// The LM head's chunked cross-entropy on the GPU (cuda/cross_entropy.cu) against the reference
// twins: full vocabulary (forward, backward, fused, logits), ignored rows, accumulation into
// nonzero gradients, f32 dweight with low-precision inputs, and vocabulary slices with padding
// rows (Note [Vocab-parallel cross-entropy]). Skipped without a GPU.
#include <cmath>

#include "braid/kernels/cuda_test/cuda_test_util.h"
#include "braid/kernels/ops.h"
#include "braid/kernels/reference/reference.h"

namespace braid::kernels::test {
namespace {

namespace ref = braid::kernels::reference;

class CudaCrossEntropy : public CudaKernelTest {};

TEST_P(CudaCrossEntropy, FullVocabulary) {
  // V = 257: odd (the logits rows are padded to 8); N = 300 with every 7th row ignored.
  const int64_t N = 300, C = 24, V = 257;
  Tensor x = rnd(Shape{N, C}), w = rnd(Shape{V, C}, 0.5f), tg = ids(Shape{N}, V);
  for (int64_t n = 0; n < N; n += 7) tg.data<int32_t>()[n] = -100;
  Tensor gx = on_gpu(x), gw = on_gpu(w), gtg = on_gpu(tg);
  Tensor lse_r = Tensor::empty(Shape{N});
  int64_t count_r = -2;
  const double loss_r = ref::lm_head_ce_forward(lse_r, &count_r, x, w, tg);
  const double ltol = (dt() == DType::f32 ? 1e-5 : 1e-2) * std::fabs(loss_r);
  Tensor glse = on_gpu(Tensor::zeros(Shape{N}));
  int64_t count = -1;
  const double loss = lm_head_ce_forward(glse, &count, gx, gw, gtg);
  EXPECT_EQ(count, count_r);
  EXPECT_EQ(count, N - (N + 6) / 7);
  EXPECT_NEAR(loss, loss_r, ltol);
  EXPECT_TRUE(close(on_cpu(glse), lse_r, 2e-5));

  const float sc = 1.0f / static_cast<float>(count_r);
  for (DType wd : {dt(), DType::f32}) {  // dweight in the input dtype or f32
    SCOPED_TRACE(::testing::Message() << "dweight " << dtype_name(wd));
    Tensor dx = rnd(Shape{N, C}), dw = Tensor::randn(Shape{V, C}, rng_, 1.0f, wd);
    Tensor dx_r = dx.clone(), dw_r = dw.clone();
    ref::lm_head_ce_backward(&dx_r, &dw_r, x, w, tg, lse_r, sc);
    Tensor gdx = on_gpu(dx), gdw = on_gpu(dw);
    lm_head_ce_backward(&gdx, &gdw, gx, gw, gtg, glse, sc);
    EXPECT_TRUE(close(on_cpu(gdx), dx_r, tol()));
    EXPECT_TRUE(close(on_cpu(gdw), dw_r, tol_for(wd == DType::f32 ? dt() : wd)));

    // fused: the same loss, lse and accumulated gradients
    Tensor gdx2 = on_gpu(dx), gdw2 = on_gpu(dw), glse2 = on_gpu(Tensor::zeros(Shape{N}));
    int64_t count2 = -1;
    const double loss2 = lm_head_ce_forward_backward(glse2, &count2, &gdx2, &gdw2, gx, gw, gtg, sc);
    EXPECT_EQ(count2, count_r);
    EXPECT_NEAR(loss2, loss_r, ltol);
    EXPECT_TRUE(close(on_cpu(glse2), lse_r, 2e-5));
    EXPECT_TRUE(close(on_cpu(gdx2), dx_r, tol()));
    EXPECT_TRUE(close(on_cpu(gdw2), dw_r, tol_for(wd == DType::f32 ? dt() : wd)));
  }
  // only one of the gradients
  Tensor dx = rnd(Shape{N, C}), dx_r = dx.clone();
  ref::lm_head_ce_backward(&dx_r, nullptr, x, w, tg, lse_r, sc);
  Tensor gdx = on_gpu(dx);
  lm_head_ce_backward(&gdx, nullptr, gx, gw, gtg, glse, sc);
  EXPECT_TRUE(close(on_cpu(gdx), dx_r, tol()));

  Tensor logits_r = Tensor::empty(Shape{N, V});
  ref::lm_head_logits(logits_r, x, w);
  Tensor glogits = on_gpu(Tensor::zeros(Shape{N, V}));
  lm_head_logits(glogits, gx, gw);
  EXPECT_TRUE(close(on_cpu(glogits), logits_r, 2e-5));
}

TEST_P(CudaCrossEntropy, BadTargetThrows) {
  const int64_t N = 5, C = 8, V = 11;
  Tensor x = on_gpu(rnd(Shape{N, C})), w = on_gpu(rnd(Shape{V, C})), tg = ids(Shape{N}, V);
  tg.data<int32_t>()[3] = static_cast<int32_t>(V);
  Tensor lse = on_gpu(Tensor::zeros(Shape{N}));
  int64_t count = 0;
  EXPECT_THROW(lm_head_ce_forward(lse, &count, x, w, on_gpu(tg)), Error);
}

TEST_P(CudaCrossEntropy, VocabularySlice) {
  // Vocabulary rows [40, 64) of which 17 are real (7 padding rows), targets below, inside and
  // beyond the slice, some ignored; then a slice of padding only.
  const int64_t N = 300, C = 24, V = 57, v0 = 40, Vl = 24;
  Tensor x = rnd(Shape{N, C}), w = rnd(Shape{Vl, C}, 0.5f), tg = ids(Shape{N}, V);
  for (int64_t n = 0; n < N; n += 7) tg.data<int32_t>()[n] = -100;
  Tensor lse = Tensor::uniform(Shape{N}, rng_, 3.0f, 4.0f);  // a global lse from the combine
  Tensor gx = on_gpu(x), gw = on_gpu(w), gtg = on_gpu(tg), glse = on_gpu(lse);
  for (int64_t valid : {V - v0, int64_t{0}}) {
    SCOPED_TRACE(::testing::Message() << "valid=" << valid);
    Tensor m_r = Tensor::empty(Shape{N}), s_r = m_r.clone(), tl_r = m_r.clone();
    ref::lm_head_ce_partial_forward(m_r, s_r, tl_r, x, w, tg, v0, valid);
    Tensor gm = on_gpu(Tensor::zeros(Shape{N})), gs = on_gpu(Tensor::zeros(Shape{N}));
    Tensor gtl = on_gpu(Tensor::full(Shape{N}, 5.0));
    lm_head_ce_partial_forward(gm, gs, gtl, gx, gw, gtg, v0, valid);
    if (valid > 0) {
      EXPECT_TRUE(close(on_cpu(gm), m_r, 2e-5));
    } else {
      for (float v : on_cpu(gm).to_f32_vector()) EXPECT_EQ(v, -INFINITY);
    }
    EXPECT_TRUE(close(on_cpu(gs), s_r, 2e-5));
    EXPECT_TRUE(close(on_cpu(gtl), tl_r, 2e-5));
    for (DType wd : {dt(), DType::f32}) {
      SCOPED_TRACE(::testing::Message() << "dweight " << dtype_name(wd));
      Tensor dx = rnd(Shape{N, C}), dw = Tensor::randn(Shape{Vl, C}, rng_, 1.0f, wd);
      Tensor dx_r = dx.clone(), dw_r = dw.clone();
      ref::lm_head_ce_partial_backward(&dx_r, &dw_r, x, w, tg, lse, 0.01f, v0, valid);
      Tensor gdx = on_gpu(dx), gdw = on_gpu(dw);
      lm_head_ce_partial_backward(&gdx, &gdw, gx, gw, gtg, glse, 0.01f, v0, valid);
      EXPECT_TRUE(close(on_cpu(gdx), dx_r, tol()));
      EXPECT_TRUE(close(on_cpu(gdw), dw_r, tol_for(wd == DType::f32 ? dt() : wd)));
      // padding rows of dweight untouched
      EXPECT_TRUE(braid::testing::bit_equal(on_cpu(gdw).narrow(valid, Vl - valid),
                                            dw.narrow(valid, Vl - valid).clone()));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaCrossEntropy, float_dtypes(), dtype_param_name);

}  // namespace
}  // namespace braid::kernels::test
