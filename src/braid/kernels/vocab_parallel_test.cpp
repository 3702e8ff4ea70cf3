// Vocab-parallel (Megatron tensor-parallel) embedding and LM-head cross-entropy: for tp ranks
// over a vocabulary V that tp does not divide, padded up as Megatron pads it, the slices
// combined as a tensor-parallel caller combines them (ops.h) give the full-vocabulary ops'
// results. Ranks run one after another here; the all-reduces are plain loops.
#include <algorithm>
#include <cmath>
#include <vector>

#include "braid/kernels/kernels_test_util.h"
#include "braid/kernels/ops.h"

namespace braid::kernels::test {
namespace {

// Rank r's slice of a vocabulary of V rows padded up to a multiple of multiple * tp (Megatron's
// make-vocab-size-divisible-by): rows [v0, v0 + Vl), the first `valid` real.
struct Slice {
  int64_t v0, Vl, valid;
};
std::vector<Slice> slices(int64_t V, int tp, int64_t multiple) {
  const int64_t unit = multiple * tp, Vp = (V + unit - 1) / unit * unit, Vl = Vp / tp;
  std::vector<Slice> s;
  for (int r = 0; r < tp; ++r) {
    const int64_t v0 = r * Vl;
    s.push_back({v0, Vl, std::clamp<int64_t>(V - v0, 0, Vl)});
  }
  return s;
}

// Rows [v0, v0 + valid) of full, then Vl - valid rows of `pad` (padding the kernels must skip).
Tensor slice_of(const Tensor& full, const Slice& s, double pad) {
  const int64_t C = full.size(1);
  Tensor t = Tensor::full(Shape{s.Vl, C}, pad, full.dtype());
  if (s.valid > 0) t.narrow(0, s.valid).copy_(full.narrow(s.v0, s.valid));
  return t;
}

// Every case: tp = 1..4, padding to a multiple of tp (minimal) and of 8 * tp (V = 37 and tp = 4
// then give the last rank a slice of padding only, valid == 0).
struct TpCase {
  int tp;
  int64_t multiple;
};
std::vector<TpCase> tp_cases() {
  std::vector<TpCase> cs;
  for (int64_t m : {int64_t{1}, int64_t{8}})
    for (int tp = 1; tp <= 4; ++tp) cs.push_back({tp, m});
  return cs;
}

class VocabParallel : public KernelTest {};

TEST_P(VocabParallel, EmbeddingSlicesSumToEmbedding) {
  const int64_t B = 3, T = 7, C = 16, V = 37;
  Tensor id = ids(Shape{B, T}, V), wte = rnd(Shape{V, C});
  id.data<int32_t>()[0] = V - 1, id.data<int32_t>()[1] = 0;
  Tensor out = Tensor::empty(Shape{B, T, C}, dt());
  embedding_forward(out, id, wte, nullptr);
  Tensor dout = rnd(Shape{B, T, C});
  bool saw_empty = false;
  for (DType gd : {dt(), DType::f32}) {  // dwte in the inputs' dtype or f32
    Tensor dwte0 = Tensor::randn(Shape{V, C}, rng_, 1.0f, gd), dwte = dwte0.clone();
    embedding_backward(&dwte, nullptr, dout, id);
    for (TpCase tc : tp_cases()) {
      SCOPED_TRACE(::testing::Message()
                   << "tp=" << tc.tp << " multiple=" << tc.multiple << " dwte " << dtype_name(gd));
      std::vector<float> sum(static_cast<size_t>(B * T * C), 0.0f);
      for (const Slice& s : slices(V, tc.tp, tc.multiple)) {
        saw_empty |= s.valid == 0;
        Tensor part = Tensor::full(Shape{B, T, C}, 7.0, dt());  // overwritten, zero rows included
        embedding_slice_forward(part, id, slice_of(wte, s, 100.0), s.v0);
        std::vector<float> p = part.to_f32_vector();
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += p[i];
        // Backward: the slice of the full initial gradient, padding rows included, gets this
        // slice's rows of embedding_backward's result, bit for bit; padding stays as it was.
        Tensor dpart = slice_of(dwte0, s, 3.0);
        embedding_slice_backward(dpart, dout, id, s.v0);
        if (s.valid > 0) {
          EXPECT_TRUE(braid::testing::bit_equal(dpart.narrow(0, s.valid),
                                                dwte.narrow(s.v0, s.valid).clone()))
              << "v0 " << s.v0;
        }
        for (float v : dpart.narrow(s.valid, s.Vl - s.valid).to_f32_vector()) EXPECT_EQ(v, 3.0f);
      }
      // Exactly one rank contributes each row, the others add +0: the sum is the row itself.
      Tensor summed = Tensor::empty(Shape{B, T, C}, dt());
      summed.copy_(Tensor::from_vector(sum, Shape{B, T, C}));
      EXPECT_TRUE(braid::testing::bit_equal(summed, out));
    }
  }
  EXPECT_TRUE(saw_empty);
}

// The tensor-parallel caller's combine of the partial forwards (ops.h), in f32 as the
// all-reduces would run: lse[n] and sum of the target logits.
struct Combined {
  std::vector<float> lse, target;
};
Combined combine(const std::vector<Tensor>& row_max, const std::vector<Tensor>& sumexp,
                 const std::vector<Tensor>& target_logit) {
  const size_t N = static_cast<size_t>(row_max[0].numel()), tp = row_max.size();
  Combined c{std::vector<float>(N), std::vector<float>(N, 0.0f)};
  for (size_t n = 0; n < N; ++n) {
    float M = -INFINITY, S = 0;
    for (size_t r = 0; r < tp; ++r) M = std::max(M, row_max[r].data<float>()[n]);
    for (size_t r = 0; r < tp; ++r)
      S += sumexp[r].data<float>()[n] * std::exp(row_max[r].data<float>()[n] - M);
    c.lse[n] = M + std::log(S);
    for (size_t r = 0; r < tp; ++r) c.target[n] += target_logit[r].data<float>()[n];
  }
  return c;
}

TEST_P(VocabParallel, CrossEntropySlicesCombineToFullVocab) {
  const int64_t C = 16, V = 37;
  bool saw_empty = false;
  for (int64_t N : {int64_t{19}, int64_t{300}}) {  // 300: more than one row chunk
    Tensor x = rnd(Shape{N, C}), w = rnd(Shape{V, C}, 0.5f), tg = ids(Shape{N}, V);
    int32_t* t = tg.data<int32_t>();
    t[1] = static_cast<int32_t>(V - 1), t[2] = 0;  // the last real row, the first row
    for (int64_t n = 0; n < N; n += 5) t[n] = -100;
    Tensor lse_full = Tensor::empty(Shape{N});
    int64_t count = 0;
    const double loss_full = lm_head_ce_forward(lse_full, &count, x, w, tg);
    const float sc = 1.0f / static_cast<float>(count);
    for (DType gd : {dt(), DType::f32}) {  // dweight in the inputs' dtype or f32
      Tensor dx_full = Tensor::zeros(Shape{N, C}, dt());
      Tensor dw_full = Tensor::zeros(Shape{V, C}, gd);
      lm_head_ce_backward(&dx_full, &dw_full, x, w, tg, lse_full, sc);
      for (TpCase tc : tp_cases()) {
        SCOPED_TRACE(::testing::Message() << "N=" << N << " tp=" << tc.tp << " multiple="
                                          << tc.multiple << " dweight " << dtype_name(gd));
        std::vector<Slice> ss = slices(V, tc.tp, tc.multiple);
        std::vector<Tensor> ws, row_max, sumexp, target_logit;
        for (const Slice& s : ss) {
          saw_empty |= s.valid == 0;
          ws.push_back(slice_of(w, s, 30.0));  // would dominate every row if it were counted
          for (auto* v : {&row_max, &sumexp, &target_logit}) v->push_back(Tensor::empty(Shape{N}));
          lm_head_ce_partial_forward(row_max.back(), sumexp.back(), target_logit.back(), x,
                                     ws.back(), tg, s.v0, s.valid);
          if (s.valid == 0) {
            for (float v : row_max.back().to_f32_vector()) EXPECT_EQ(v, -INFINITY);
            for (float v : sumexp.back().to_f32_vector()) EXPECT_EQ(v, 0.0f);
          }
        }
        Combined c = combine(row_max, sumexp, target_logit);
        double loss = 0;
        for (int64_t n = 0; n < N; ++n) {
          ASSERT_TRUE(std::isfinite(c.lse[n])) << "row " << n;
          if (t[n] != -100) loss += c.lse[n] - c.target[n];
        }
        // Same logits up to the GEMM's f32 summation order, in every dtype.
        EXPECT_NEAR(loss, loss_full, 1e-5 * std::fabs(loss_full));
        EXPECT_TRUE(close(Tensor::from_vector(c.lse, Shape{N}), lse_full, 2e-5));
        // Backward with the combined lse: dx summed over ranks, dweight slices concatenated.
        Tensor lse = Tensor::from_vector(c.lse, Shape{N});
        std::vector<float> dx_sum(static_cast<size_t>(N * C), 0.0f);
        Tensor dw = Tensor::zeros(Shape{V, C}, gd);
        for (size_t r = 0; r < ss.size(); ++r) {
          const Slice& s = ss[r];
          Tensor dx = Tensor::zeros(Shape{N, C}, dt()), dws = Tensor::zeros(Shape{s.Vl, C}, gd);
          lm_head_ce_partial_backward(&dx, &dws, x, ws[r], tg, lse, sc, s.v0, s.valid);
          std::vector<float> d = dx.to_f32_vector();
          for (size_t i = 0; i < dx_sum.size(); ++i) dx_sum[i] += d[i];
          if (s.valid > 0) dw.narrow(s.v0, s.valid).copy_(dws.narrow(0, s.valid));
          for (float v : dws.narrow(s.valid, s.Vl - s.valid).to_f32_vector()) EXPECT_EQ(v, 0.0f);
        }
        Tensor dx = Tensor::empty(Shape{N, C}, dt());
        dx.copy_(Tensor::from_vector(dx_sum, Shape{N, C}));
        EXPECT_TRUE(close(dx, dx_full, tol()));
        EXPECT_TRUE(close(dw, dw_full, tol_for(gd)));
      }
    }
  }
  EXPECT_TRUE(saw_empty);
}

// The one-rank case is the full op itself: v0 = 0, valid = V reproduce lm_head_ce_forward's lse
// and lm_head_ce_backward's gradients bit for bit (one code path).
TEST_P(VocabParallel, WholeVocabSliceIsTheFullOp) {
  const int64_t N = 29, C = 16, V = 37;
  Tensor x = rnd(Shape{N, C}), w = rnd(Shape{V, C}, 0.5f), tg = ids(Shape{N}, V);
  tg.data<int32_t>()[3] = -100;
  Tensor lse = Tensor::empty(Shape{N}), m = lse.clone(), s = lse.clone(), tl = lse.clone();
  int64_t count = 0;
  lm_head_ce_forward(lse, &count, x, w, tg);
  lm_head_ce_partial_forward(m, s, tl, x, w, tg, 0, V);
  std::vector<float> l = lse.to_f32_vector(), mv = m.to_f32_vector(), sv = s.to_f32_vector();
  for (int64_t n = 0; n < N; ++n) EXPECT_EQ(l[n], mv[n] + std::log(sv[n])) << "row " << n;
  Tensor dx = rnd(Shape{N, C}), dw = rnd(Shape{V, C}), dx2 = dx.clone(), dw2 = dw.clone();
  lm_head_ce_backward(&dx, &dw, x, w, tg, lse, 0.25f);
  lm_head_ce_partial_backward(&dx2, &dw2, x, w, tg, lse, 0.25f, 0, V);
  EXPECT_TRUE(braid::testing::bit_equal(dx2, dx));
  EXPECT_TRUE(braid::testing::bit_equal(dw2, dw));
}

INSTANTIATE_TEST_SUITE_P(Kernels, VocabParallel, float_dtypes(), dtype_param_name);

}  // namespace
}  // namespace braid::kernels::test
