// The kernel harness, part 1: every fast op (forward and backward) against its naive twin in
// reference/, on fresh random inputs, in f32 (tight), f16 and bf16 (looser), with odd sizes.
// Backward outputs start non-zero to check that gradients accumulate (+=).
// Part 2 (rope, attention, lm-head cross-entropy, optimisers): kernels_nn_test.cpp.
#include <cmath>

#include "braid/kernels/kernels_test_util.h"
#include "braid/kernels/ops.h"
#include "braid/kernels/reference/reference.h"

namespace braid::kernels::test {
namespace {

namespace ref = braid::kernels::reference;

class Ops : public KernelTest {};

TEST_P(Ops, Matmul) {
  struct Case {
    int64_t M, N, K;
    float alpha, beta;
  };
  for (Case cs :
       {Case{37, 29, 53, 1.0f, 0.0f}, Case{64, 128, 96, 0.5f, 0.7f}, Case{1, 7, 300, 1.0f, 1.0f}}) {
    for (int tr = 0; tr < 4; ++tr) {
      bool ta = tr & 1, tb = tr & 2;
      SCOPED_TRACE(::testing::Message() << cs.M << "x" << cs.N << "x" << cs.K << " ta=" << ta
                                        << " tb=" << tb << " beta=" << cs.beta);
      Tensor a = rnd(ta ? Shape{cs.K, cs.M} : Shape{cs.M, cs.K});
      Tensor b = rnd(tb ? Shape{cs.N, cs.K} : Shape{cs.K, cs.N});
      Tensor c = rnd(Shape{cs.M, cs.N}), c_ref = c.clone();
      matmul(c, a, b, ta, tb, cs.alpha, cs.beta);
      ref::matmul(c_ref, a, b, ta, tb, cs.alpha, cs.beta);
      EXPECT_TRUE(close(c, c_ref, tol()));
    }
  }
}

TEST_P(Ops, Linear) {
  const int64_t B = 2, T = 13, C = 24, OC = 40;
  Tensor x = rnd(Shape{B, T, C}), w = rnd(Shape{OC, C}, 0.2f), bias = rnd(Shape{OC});
  for (bool with_bias : {true, false}) {
    Tensor out = Tensor::empty(Shape{B, T, OC}, dt()), out_ref = out.clone();
    linear_forward(out, x, w, with_bias ? &bias : nullptr);
    ref::linear_forward(out_ref, x, w, with_bias ? &bias : nullptr);
    EXPECT_TRUE(close(out, out_ref, tol())) << "bias " << with_bias;
  }
  Tensor dout = rnd(Shape{B, T, OC});
  Tensor dx = rnd(Shape{B, T, C}), dw = rnd(Shape{OC, C}), db = rnd(Shape{OC});
  Tensor dx_r = dx.clone(), dw_r = dw.clone(), db_r = db.clone();
  linear_backward(&dx, &dw, &db, dout, x, w);
  ref::linear_backward(&dx_r, &dw_r, &db_r, dout, x, w);
  EXPECT_TRUE(close(dx, dx_r, tol()));
  EXPECT_TRUE(close(dw, dw_r, tol()));
  EXPECT_TRUE(close(db, db_r, tol()));
  // Null gradients are skipped.
  Tensor dw2 = dw.clone(), dw2_r = dw_r.clone();
  linear_backward(nullptr, &dw2, nullptr, dout, x, w);
  ref::linear_backward(nullptr, &dw2_r, nullptr, dout, x, w);
  EXPECT_TRUE(close(dw2, dw2_r, tol()));
}

TEST_P(Ops, Embedding) {
  const int64_t B = 3, T = 11, C = 17, V = 9, maxT = 16;
  Tensor id = ids(Shape{B, T}, V);  // V < B*T: repeated ids accumulate
  Tensor wte = rnd(Shape{V, C}), wpe = rnd(Shape{maxT, C});
  for (bool with_pos : {true, false}) {
    Tensor out = Tensor::empty(Shape{B, T, C}, dt()), out_r = out.clone();
    embedding_forward(out, id, wte, with_pos ? &wpe : nullptr);
    ref::embedding_forward(out_r, id, wte, with_pos ? &wpe : nullptr);
    EXPECT_TRUE(close(out, out_r, tol()));
  }
  Tensor dout = rnd(Shape{B, T, C});
  Tensor dwte = rnd(Shape{V, C}), dwpe = rnd(Shape{maxT, C});
  Tensor dwte_r = dwte.clone(), dwpe_r = dwpe.clone();
  embedding_backward(&dwte, &dwpe, dout, id);
  ref::embedding_backward(&dwte_r, &dwpe_r, dout, id);
  EXPECT_TRUE(close(dwte, dwte_r, tol()));
  EXPECT_TRUE(close(dwpe, dwpe_r, tol()));
}

TEST_P(Ops, EmbeddingSlice) {
  // Rows [5, 12) of a vocabulary of 20: ids below, inside and beyond the slice.
  const int64_t B = 3, T = 11, C = 17, V = 20, v0 = 5, Vl = 7;
  Tensor id = ids(Shape{B, T}, V), wte = rnd(Shape{Vl, C});
  Tensor out = Tensor::empty(Shape{B, T, C}, dt()), out_r = out.clone();
  embedding_slice_forward(out, id, wte, v0);
  ref::embedding_slice_forward(out_r, id, wte, v0);
  EXPECT_TRUE(close(out, out_r, 0.0));
  Tensor dout = rnd(Shape{B, T, C}), dwte = rnd(Shape{Vl, C}), dwte_r = dwte.clone();
  embedding_slice_backward(dwte, dout, id, v0);
  ref::embedding_slice_backward(dwte_r, dout, id, v0);
  EXPECT_TRUE(close(dwte, dwte_r, tol()));
}

TEST_P(Ops, LayerNorm) {
  const int64_t N = 29, C = 37;
  Tensor x = rnd(Shape{N, C}, 2.0f), w = rnd(Shape{C}), b = rnd(Shape{C});
  Tensor out = Tensor::empty(Shape{N, C}, dt()), out_r = out.clone();
  Tensor mean = Tensor::empty(Shape{N}), rstd = Tensor::empty(Shape{N});
  Tensor mean_r = mean.clone(), rstd_r = rstd.clone();
  layernorm_forward(out, mean, rstd, x, w, b, 1e-5f);
  ref::layernorm_forward(out_r, mean_r, rstd_r, x, w, b, 1e-5f);
  EXPECT_TRUE(close(out, out_r, tol()));
  EXPECT_TRUE(close(mean, mean_r, 2e-5));
  EXPECT_TRUE(close(rstd, rstd_r, 2e-5));
  Tensor dout = rnd(Shape{N, C});
  Tensor dx = rnd(Shape{N, C}), dw = rnd(Shape{C}), db = rnd(Shape{C});
  Tensor dx_r = dx.clone(), dw_r = dw.clone(), db_r = db.clone();
  layernorm_backward(&dx, &dw, &db, dout, x, w, mean, rstd);
  ref::layernorm_backward(&dx_r, &dw_r, &db_r, dout, x, w, mean, rstd);
  EXPECT_TRUE(close(dx, dx_r, tol()));
  EXPECT_TRUE(close(dw, dw_r, tol()));
  EXPECT_TRUE(close(db, db_r, tol()));
}

TEST_P(Ops, RmsNorm) {
  const int64_t N = 23, C = 41;
  Tensor x = rnd(Shape{N, C}, 2.0f), w = rnd(Shape{C});
  Tensor out = Tensor::empty(Shape{N, C}, dt()), out_r = out.clone();
  Tensor rstd = Tensor::empty(Shape{N}), rstd_r = rstd.clone();
  rmsnorm_forward(out, rstd, x, w, 1e-6f);
  ref::rmsnorm_forward(out_r, rstd_r, x, w, 1e-6f);
  EXPECT_TRUE(close(out, out_r, tol()));
  EXPECT_TRUE(close(rstd, rstd_r, 2e-5));
  Tensor dout = rnd(Shape{N, C}), dx = rnd(Shape{N, C}), dw = rnd(Shape{C});
  Tensor dx_r = dx.clone(), dw_r = dw.clone();
  rmsnorm_backward(&dx, &dw, dout, x, w, rstd);
  ref::rmsnorm_backward(&dx_r, &dw_r, dout, x, w, rstd);
  EXPECT_TRUE(close(dx, dx_r, tol()));
  EXPECT_TRUE(close(dw, dw_r, tol()));
}

TEST_P(Ops, Gelu) {
  Tensor x = rnd(Shape{7, 131}, 3.0f), out = Tensor::empty(Shape{7, 131}, dt());
  Tensor out_r = out.clone();
  gelu_forward(out, x);
  ref::gelu_forward(out_r, x);
  EXPECT_TRUE(close(out, out_r, tol()));
  Tensor dout = rnd(Shape{7, 131}), dx = rnd(Shape{7, 131}), dx_r = dx.clone();
  gelu_backward(dx, dout, x);
  ref::gelu_backward(dx_r, dout, x);
  EXPECT_TRUE(close(dx, dx_r, tol()));
  // Setting (accumulate = false) ignores what dx held: NaNs stay out.
  Tensor set = Tensor::full(Shape{7, 131}, std::nanf(""), dt()), set_r = dx_r.clone();
  gelu_backward(set, dout, x, /*accumulate=*/false);
  ref::gelu_backward(set_r, dout, x, /*accumulate=*/false);
  EXPECT_TRUE(close(set, set_r, tol()));
}

TEST_P(Ops, SwiGlu) {
  Shape s{5, 77};
  Tensor g = rnd(s, 3.0f), u = rnd(s), out = Tensor::empty(s, dt()), out_r = out.clone();
  swiglu_forward(out, g, u);
  ref::swiglu_forward(out_r, g, u);
  EXPECT_TRUE(close(out, out_r, tol()));
  Tensor dout = rnd(s), dg = rnd(s), du = rnd(s), dg_r = dg.clone(), du_r = du.clone();
  swiglu_backward(&dg, &du, dout, g, u);
  ref::swiglu_backward(&dg_r, &du_r, dout, g, u);
  EXPECT_TRUE(close(dg, dg_r, tol()));
  EXPECT_TRUE(close(du, du_r, tol()));
}

TEST_P(Ops, Columns) {
  const int64_t N = 9, CT = 3 * 21, W = 21;
  Tensor qkv = rnd(Shape{N, CT});
  for (int64_t start : {int64_t{0}, W, 2 * W, int64_t{5}}) {
    Tensor out = Tensor::empty(Shape{N, W}, dt()), out_r = out.clone();
    copy_columns(out, qkv, start);
    ref::copy_columns(out_r, qkv, start);
    EXPECT_TRUE(close(out, out_r, 0.0));
    Tensor d = rnd(Shape{N, CT}), d_r = d.clone(), g = rnd(Shape{N, W});
    add_columns(d, g, start);
    ref::add_columns(d_r, g, start);
    EXPECT_TRUE(close(d, d_r, tol()));
    Tensor w = rnd(Shape{N, CT}), w_r = w.clone();  // the other columns kept
    set_columns(w, g, start);
    ref::set_columns(w_r, g, start);
    EXPECT_TRUE(close(w, w_r, 0.0));
  }
}

// Note [Attention over key blocks]: blocks merged one by one into accumulators that start
// empty (lse -inf) equal the reference's merge, rows offset and all.
TEST_P(Ops, AttentionMerge) {
  const int64_t B = 2, T = 6, NH = 3, HS = 5;
  Tensor acc = Tensor::zeros(Shape{B, T, NH, HS}, DType::f32), acc_r = acc.clone();
  Tensor lacc = Tensor::full(Shape{B, NH, T}, -INFINITY, DType::f32), lacc_r = lacc.clone();
  for (auto [t0, n] : {std::pair<int64_t, int64_t>{0, 6}, {2, 3}, {0, 6}, {5, 1}}) {
    SCOPED_TRACE(::testing::Message() << "t0=" << t0 << " n=" << n);
    Tensor o = rnd(Shape{B, n, NH, HS}), l = rnd(Shape{B, NH, n}).to(DType::f32);
    attention_merge(acc, lacc, o, l, t0);
    ref::attention_merge(acc_r, lacc_r, o, l, t0);
    EXPECT_TRUE(close(acc, acc_r, 1e-5));
    EXPECT_TRUE(close(lacc, lacc_r, 1e-5));
  }
}

TEST_P(Ops, Elementwise) {
  Shape s{3, 1001};
  Tensor a = rnd(s), b = rnd(s), out = Tensor::empty(s, dt()), out_r = out.clone();
  add_forward(out, a, b);
  ref::add_forward(out_r, a, b);
  EXPECT_TRUE(close(out, out_r, tol()));
  for (DType xd : {DType::f32, DType::bf16, DType::f16}) {  // axpy across dtypes
    Tensor y = rnd(s), x = Tensor::randn(s, rng_, 1.0f, xd), y_r = y.clone();
    axpy(y, x, -0.37f);
    ref::axpy(y_r, x, -0.37f);
    EXPECT_TRUE(close(y, y_r, tol())) << "x dtype " << dtype_name(xd);
  }
  Tensor x = rnd(s), x_r = x.clone();
  scale(x, 0.3f);
  ref::scale(x_r, 0.3f);
  EXPECT_TRUE(close(x, x_r, tol()));
  Tensor big = rnd(Shape{100003});
  EXPECT_NEAR(sum_squares(big), ref::sum_squares(big), 1e-9 * ref::sum_squares(big));
}

INSTANTIATE_TEST_SUITE_P(Kernels, Ops, float_dtypes(), dtype_param_name);

// f16 tops out at 65504: a forward whose f32 result rounds past it stores +-inf (what a loss
// scaler looks for), never a wrapped or saturated value.
TEST(F16Overflow, ForwardsStoreInf) {
  auto full = [](Shape s, double v) { return Tensor::full(s, v, DType::f16); };
  auto all_inf = [](const Tensor& t, float sign) {
    for (float v : t.to_f32_vector())
      if (!(std::isinf(v) && v * sign > 0)) return ::testing::AssertionFailure() << "got " << v;
    return ::testing::AssertionSuccess();
  };
  Tensor big = full(Shape{4, 32}, 60000.0), out = Tensor::empty(Shape{4, 32}, DType::f16);
  add_forward(out, big, big);
  EXPECT_TRUE(all_inf(out, 1));
  Tensor y = big.clone();
  axpy(y, big, -3.0f);
  EXPECT_TRUE(all_inf(y, -1));
  y = big.clone();
  scale(y, 2.0f);
  EXPECT_TRUE(all_inf(y, 1));
  Tensor x = full(Shape{4, 3}, 300.0), w = full(Shape{5, 3}, -300.0), lo = full(Shape{4, 5}, 0);
  linear_forward(lo, x, w, nullptr);
  EXPECT_TRUE(all_inf(lo, -1));
  matmul(lo, x, w, false, true);
  EXPECT_TRUE(all_inf(lo, -1));
  swiglu_forward(out, full(Shape{4, 32}, 300.0), full(Shape{4, 32}, 300.0));
  EXPECT_TRUE(all_inf(out, 1));
  Tensor id = Tensor::zeros(Shape{1, 4}, DType::i32),
         emb = Tensor::empty(Shape{1, 4, 32}, DType::f16);
  embedding_forward(emb, id, big, &big);
  EXPECT_TRUE(all_inf(emb, 1));
  // layernorm: the row [4, 0, 0, 0] normalises to [sqrt(3), ...]; sqrt(3) * 60000 > 65504
  Tensor row = full(Shape{1, 4}, 0.0), ln = Tensor::empty(Shape{1, 4}, DType::f16);
  row.flat_range(0, 1).fill_(4.0);
  Tensor mean = Tensor::empty(Shape{1}), rstd = Tensor::empty(Shape{1});
  layernorm_forward(ln, mean, rstd, row, full(Shape{4}, 60000.0), full(Shape{4}, 0.0), 1e-5f);
  EXPECT_TRUE(std::isinf(ln.to_f32_vector()[0]));
}

}  // namespace
}  // namespace braid::kernels::test
