// Note [Parameter gradients] (ops.h): with low-precision inputs, every parameter gradient may
// be f32. Each backward that makes one is checked against its naive twin with f32 parameter
// gradients (tight: the kernel accumulates in f32), and, over several accumulating calls (as
// gradient accumulation makes them), the f32 gradient must be far closer to the f64 truth
// than a gradient kept in the low dtype.
#include <functional>
#include <vector>

#include "braid/kernels/kernels_test_util.h"
#include "braid/kernels/ops.h"
#include "braid/kernels/reference/reference.h"

namespace braid::kernels::test {
namespace {

namespace ref = braid::kernels::reference;

// An f32 gradient of low-precision inputs carries only f32 rounding.
constexpr double kF32Grad = 1e-5;

class ParamGrads : public KernelTest {
 protected:
  // Accumulates `steps` calls of backward(step, grad) into an f32 gradient and into one of the
  // test's low dtype, both starting at zero; the truth is the f64 sum of ref_backward's
  // per-step results. The f32 gradient must be within f32 rounding of the truth and at least
  // 16x closer to it than the low-precision one.
  void expect_f32_closer(const Shape& s, int steps,
                         const std::function<void(int, Tensor&)>& backward,
                         const std::function<void(int, Tensor&)>& ref_backward) {
    std::vector<double> truth(static_cast<size_t>(s.numel()), 0.0);
    for (int i = 0; i < steps; ++i) {
      Tensor r = Tensor::zeros(s);
      ref_backward(i, r);
      std::vector<float> v = r.to_f32_vector();
      for (size_t j = 0; j < v.size(); ++j) truth[j] += v[j];
    }
    Tensor g32 = Tensor::zeros(s), glow = Tensor::zeros(s, dt());
    for (int i = 0; i < steps; ++i) backward(i, g32), backward(i, glow);
    double mag = 0, err32 = 0, errlow = 0;
    std::vector<float> a = g32.to_f32_vector(), b = glow.to_f32_vector();
    for (size_t j = 0; j < truth.size(); ++j) {
      mag = std::max(mag, std::fabs(truth[j]));
      err32 = std::max(err32, std::fabs(a[j] - truth[j]));
      errlow = std::max(errlow, std::fabs(b[j] - truth[j]));
    }
    EXPECT_LE(err32, kF32Grad * mag) << "f32 gradient, max |truth| " << mag;
    EXPECT_LT(16 * err32, errlow) << "f32 gradient error " << err32 << " vs " << dtype_name(dt())
                                  << " " << errlow;
  }
};

TEST_P(ParamGrads, Linear) {
  const int64_t B = 2, T = 13, C = 24, OC = 40;
  Tensor x = rnd(Shape{B, T, C}), w = rnd(Shape{OC, C}, 0.2f), dout = rnd(Shape{B, T, OC});
  Tensor dx = rnd(Shape{B, T, C}), dw = rnd_f32(Shape{OC, C}), db = rnd_f32(Shape{OC});
  Tensor dx_r = dx.clone(), dw_r = dw.clone(), db_r = db.clone();
  linear_backward(&dx, &dw, &db, dout, x, w);
  ref::linear_backward(&dx_r, &dw_r, &db_r, dout, x, w);
  EXPECT_EQ(dx.dtype(), dt());
  EXPECT_TRUE(close(dx, dx_r, tol()));
  EXPECT_TRUE(close(dw, dw_r, kF32Grad));
  EXPECT_TRUE(close(db, db_r, kF32Grad));
  // Each parameter gradient on its own, one f32 and one in the inputs' dtype.
  Tensor db_low = rnd(Shape{OC}), db_low_r = db_low.clone();
  linear_backward(nullptr, &dw, &db_low, dout, x, w);
  ref::linear_backward(nullptr, &dw_r, &db_low_r, dout, x, w);
  EXPECT_TRUE(close(dw, dw_r, kF32Grad));
  EXPECT_TRUE(close(db_low, db_low_r, tol()));

  std::vector<Tensor> xs, gs;
  for (int i = 0; i < 8; ++i) xs.push_back(rnd(Shape{B, T, C})), gs.push_back(rnd(Shape{B, T, OC}));
  expect_f32_closer(
      Shape{OC, C}, 8,
      [&](int i, Tensor& g) { linear_backward(nullptr, &g, nullptr, gs[i], xs[i], w); },
      [&](int i, Tensor& g) { ref::linear_backward(nullptr, &g, nullptr, gs[i], xs[i], w); });
  expect_f32_closer(
      Shape{OC}, 8,
      [&](int i, Tensor& g) { linear_backward(nullptr, nullptr, &g, gs[i], xs[i], w); },
      [&](int i, Tensor& g) { ref::linear_backward(nullptr, nullptr, &g, gs[i], xs[i], w); });
}

TEST_P(ParamGrads, Embedding) {
  const int64_t B = 3, T = 11, C = 17, V = 9, maxT = 16;
  Tensor id = ids(Shape{B, T}, V), dout = rnd(Shape{B, T, C});
  Tensor dwte = rnd_f32(Shape{V, C}), dwpe = rnd_f32(Shape{maxT, C});
  Tensor dwte_r = dwte.clone(), dwpe_r = dwpe.clone();
  embedding_backward(&dwte, &dwpe, dout, id);
  ref::embedding_backward(&dwte_r, &dwpe_r, dout, id);
  EXPECT_TRUE(close(dwte, dwte_r, kF32Grad));
  EXPECT_TRUE(close(dwpe, dwpe_r, kF32Grad));
  Tensor dwpe_low = rnd(Shape{maxT, C}), dwpe_low_r = dwpe_low.clone();
  embedding_backward(&dwte, &dwpe_low, dout, id);
  ref::embedding_backward(&dwte_r, &dwpe_low_r, dout, id);
  EXPECT_TRUE(close(dwte, dwte_r, kF32Grad));
  EXPECT_TRUE(close(dwpe_low, dwpe_low_r, tol()));
  embedding_backward(nullptr, &dwpe, dout, id);  // dwpe alone
  ref::embedding_backward(nullptr, &dwpe_r, dout, id);
  EXPECT_TRUE(close(dwpe, dwpe_r, kF32Grad));

  std::vector<Tensor> gs;
  for (int i = 0; i < 16; ++i) gs.push_back(rnd(Shape{B, T, C}));
  expect_f32_closer(
      Shape{V, C}, 16, [&](int i, Tensor& g) { embedding_backward(&g, nullptr, gs[i], id); },
      [&](int i, Tensor& g) { ref::embedding_backward(&g, nullptr, gs[i], id); });
  expect_f32_closer(
      Shape{maxT, C}, 16, [&](int i, Tensor& g) { embedding_backward(nullptr, &g, gs[i], id); },
      [&](int i, Tensor& g) { ref::embedding_backward(nullptr, &g, gs[i], id); });
}

TEST_P(ParamGrads, LayerNorm) {
  const int64_t N = 29, C = 37;
  Tensor x = rnd(Shape{N, C}, 2.0f), w = rnd(Shape{C}), b = rnd(Shape{C});
  Tensor out = Tensor::empty(Shape{N, C}, dt());
  Tensor mean = Tensor::empty(Shape{N}), rstd = Tensor::empty(Shape{N});
  layernorm_forward(out, mean, rstd, x, w, b, 1e-5f);
  Tensor dout = rnd(Shape{N, C}), dx = rnd(Shape{N, C});
  Tensor dw = rnd_f32(Shape{C}), db = rnd_f32(Shape{C});
  Tensor dx_r = dx.clone(), dw_r = dw.clone(), db_r = db.clone();
  layernorm_backward(&dx, &dw, &db, dout, x, w, mean, rstd);
  ref::layernorm_backward(&dx_r, &dw_r, &db_r, dout, x, w, mean, rstd);
  EXPECT_TRUE(close(dx, dx_r, tol()));
  EXPECT_TRUE(close(dw, dw_r, kF32Grad));
  EXPECT_TRUE(close(db, db_r, kF32Grad));
  Tensor db_low = rnd(Shape{C}), db_low_r = db_low.clone();
  layernorm_backward(nullptr, &dw, &db_low, dout, x, w, mean, rstd);
  ref::layernorm_backward(nullptr, &dw_r, &db_low_r, dout, x, w, mean, rstd);
  EXPECT_TRUE(close(dw, dw_r, kF32Grad));
  EXPECT_TRUE(close(db_low, db_low_r, tol()));

  std::vector<Tensor> gs;
  for (int i = 0; i < 8; ++i) gs.push_back(rnd(Shape{N, C}));
  auto run = [&](bool weight, bool reference) {
    return [&, weight, reference](int i, Tensor& g) {
      Tensor* pw = weight ? &g : nullptr;
      Tensor* pb = weight ? nullptr : &g;
      if (reference)
        ref::layernorm_backward(nullptr, pw, pb, gs[i], x, w, mean, rstd);
      else
        layernorm_backward(nullptr, pw, pb, gs[i], x, w, mean, rstd);
    };
  };
  expect_f32_closer(Shape{C}, 8, run(true, false), run(true, true));
  expect_f32_closer(Shape{C}, 8, run(false, false), run(false, true));
}

TEST_P(ParamGrads, RmsNorm) {
  const int64_t N = 23, C = 41;
  Tensor x = rnd(Shape{N, C}, 2.0f), w = rnd(Shape{C});
  Tensor out = Tensor::empty(Shape{N, C}, dt()), rstd = Tensor::empty(Shape{N});
  rmsnorm_forward(out, rstd, x, w, 1e-6f);
  Tensor dout = rnd(Shape{N, C}), dx = rnd(Shape{N, C}), dw = rnd_f32(Shape{C});
  Tensor dx_r = dx.clone(), dw_r = dw.clone();
  rmsnorm_backward(&dx, &dw, dout, x, w, rstd);
  ref::rmsnorm_backward(&dx_r, &dw_r, dout, x, w, rstd);
  EXPECT_TRUE(close(dx, dx_r, tol()));
  EXPECT_TRUE(close(dw, dw_r, kF32Grad));

  std::vector<Tensor> gs;
  for (int i = 0; i < 8; ++i) gs.push_back(rnd(Shape{N, C}));
  expect_f32_closer(
      Shape{C}, 8, [&](int i, Tensor& g) { rmsnorm_backward(nullptr, &g, gs[i], x, w, rstd); },
      [&](int i, Tensor& g) { ref::rmsnorm_backward(nullptr, &g, gs[i], x, w, rstd); });
}

TEST_P(ParamGrads, LmHeadCrossEntropy) {
  // N = 300 rows: two row chunks; some rows ignored.
  const int64_t N = 300, C = 24, V = 257;
  Tensor x = rnd(Shape{N, C}), w = rnd(Shape{V, C}, 0.5f), tg = ids(Shape{N}, V);
  for (int64_t n = 0; n < N; n += 7) tg.data<int32_t>()[n] = -100;
  Tensor lse = Tensor::empty(Shape{N}), lse_r = lse.clone();
  int64_t count = 0;
  ref::lm_head_ce_forward(lse_r, &count, x, w, tg);
  const float sc = 1.0f / static_cast<float>(count);
  // dlogits are rounded to the inputs' dtype for the GEMMs (as autocast does), so dweight is
  // as close to the f64 reference as that rounding allows.
  Tensor dx = rnd(Shape{N, C}), dw = rnd_f32(Shape{V, C}), dx_r = dx.clone(), dw_r = dw.clone();
  lm_head_ce_forward_backward(lse, &count, &dx, &dw, x, w, tg, sc);
  ref::lm_head_ce_forward_backward(lse_r, &count, &dx_r, &dw_r, x, w, tg, sc);
  EXPECT_TRUE(close(dx, dx_r, tol()));
  EXPECT_TRUE(close(dw, dw_r, tol()));
  Tensor dw2 = rnd_f32(Shape{V, C}), dw2_r = dw2.clone();
  lm_head_ce_backward(nullptr, &dw2, x, w, tg, lse, sc);
  ref::lm_head_ce_backward(nullptr, &dw2_r, x, w, tg, lse_r, sc);
  EXPECT_TRUE(close(dw2, dw2_r, tol()));

  // Accumulation: the truth here is the kernel's own per-step result, computed into a zeroed
  // f32 gradient (the dlogits rounding is the same in both), so only the accumulation differs.
  std::vector<Tensor> xs;
  for (int i = 0; i < 8; ++i) xs.push_back(rnd(Shape{N, C}));
  auto step = [&](int i, Tensor& g) {
    Tensor l = Tensor::empty(Shape{N});
    int64_t c = 0;
    lm_head_ce_forward_backward(l, &c, nullptr, &g, xs[i], w, tg, sc);
  };
  expect_f32_closer(Shape{V, C}, 8, step, step);
}

TEST_P(ParamGrads, WrongGradientDtypeIsRefused) {
  Tensor x = rnd(Shape{4, 8}), w = rnd(Shape{3, 8}), dout = rnd(Shape{4, 3});
  Tensor dw = Tensor::zeros(Shape{3, 8}, DType::i32);
  try {
    linear_backward(nullptr, &dw, nullptr, dout, x, w);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dweight has dtype i32, expected f32 or"),
              std::string::npos)
        << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, ParamGrads, ::testing::Values(DType::bf16, DType::f16),
                         dtype_param_name);

}  // namespace
}  // namespace braid::kernels::test
