// Causal self-attention, flash style (FlashAttention-2 on CPU tiles), with GQA.
//   q[B,T,NH,HS], k[B,T,NKV,HS], v[B,T,NKV,HS], out[B,T,NH,HS], lse[B,NH,T] f32;
//   query head h reads key/value head h / (NH/NKV); scale = 1/sqrt(HS).
// Forward, per (b,h): the head's rows are gathered into contiguous f32 panels (Q scaled,
//   K transposed to [HS,T], V), then each query block of kBq rows walks the key blocks of
//   kBk columns at or below the diagonal with an online softmax (running max m, sum l);
//   out = O / l, lse = m + log l. Only a kBq x kBk tile of scores exists at any time.
// Backward, per (b, kv head) so dk/dv have one writer: for each query head of the group,
//   D_i = rowsum(dO_i * O_i); for each key block j and query block i >= j the probabilities
//   are recomputed, P = exp(S - lse), then dV_j += P^T dO_i, dP = dO_i V_j^T,
//   dS = P (dP - D) * scale, dQ_i += dS K_j, dK_j += dS^T Q_i.
// Per-thread memory: a few [T,HS] panels and [kBq,kBk] tiles (thread_local scratch).
#include <cmath>

#include "braid/kernels/cpu/attention_tiles.h"
#include "braid/kernels/cpu/common.h"
#include "braid/kernels/ops.h"

namespace braid::kernels {

using namespace cpu;

namespace {

struct AttnDims {
  int64_t B, T, NH, NKV, HS;
};

AttnDims check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  check_float(op, "q", q);
  check_same_dtype(op, "k", k, "q", q);
  check_same_dtype(op, "v", v, "q", q);
  BRAID_CHECK(q.dim() == 4 && k.dim() == 4, op, ": q ", q.shape().str(), " and k ", k.shape().str(),
              " must be [B,T,NH,HS] and [B,T,NKV,HS]");
  AttnDims d{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3)};
  BRAID_CHECK(k.size(0) == d.B && k.size(1) == d.T && k.size(3) == d.HS, op, ": k ",
              k.shape().str(), " does not match q ", q.shape().str());
  check_shape(op, "v", v, k.shape());
  BRAID_CHECK(d.NKV > 0 && d.NH % d.NKV == 0, op, ": NH=", d.NH,
              " query heads is not a multiple of NKV=", d.NKV, " key/value heads");
  return d;
}

// dst[T,HS] (f32, contiguous) = src rows t*stride (+ head offset already applied) * mul.
template <typename T>
void gather(float* dst, const T* src, int64_t T_, int64_t HS, int64_t stride, float mul) {
  for (int64_t t = 0; t < T_; ++t)
    for (int64_t d = 0; d < HS; ++d) dst[t * HS + d] = ld(&src[t * stride + d]) * mul;
}

// dst[HS,T] = src^T (src rows t*stride).
template <typename T>
void gather_transposed(float* dst, const T* src, int64_t T_, int64_t HS, int64_t stride) {
  for (int64_t t = 0; t < T_; ++t)
    for (int64_t d = 0; d < HS; ++d) dst[d * T_ + t] = ld(&src[t * stride + d]);
}

template <typename T>
void forward_impl(T* out, float* lse, const T* q, const T* k, const T* v, const AttnDims& d) {
  const int64_t T_ = d.T, HS = d.HS, group = d.NH / d.NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel
  {
    float* Q = scratch(0, T_ * HS);
    float* Kt = scratch(1, HS * T_);
    float* V = scratch(2, T_ * HS);
    float* S = scratch(3, kBq * kBk + kBq * HS + 2 * kBq);
    float* O = S + kBq * kBk;
    float* m = O + kBq * HS;
    float* l = m + kBq;
    int64_t loaded = -1;  // (b * NKV + kvh) whose K/V panels are loaded
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < d.B * d.NH; ++bh) {
      int64_t b = bh / d.NH, h = bh % d.NH, kvh = h / group;
      if (loaded != b * d.NKV + kvh) {
        const int64_t kv_off = (b * T_ * d.NKV + kvh) * HS;
        gather_transposed(Kt, k + kv_off, T_, HS, d.NKV * HS);
        gather(V, v + kv_off, T_, HS, d.NKV * HS, 1.0f);
        loaded = b * d.NKV + kvh;
      }
      const int64_t q_off = (b * T_ * d.NH + h) * HS;
      gather(Q, q + q_off, T_, HS, d.NH * HS, scale);
      for (int64_t i0 = 0; i0 < T_; i0 += kBq) {
        const int64_t bq = std::min(kBq, T_ - i0);
        for (int64_t r = 0; r < bq; ++r) m[r] = -INFINITY, l[r] = 0.0f;
        for (int64_t x = 0; x < bq * HS; ++x) O[x] = 0.0f;
        for (int64_t j0 = 0; j0 < i0 + bq; j0 += kBk) {
          const int64_t bk = std::min(kBk, T_ - j0);
          tile_scores(S, Q + i0 * HS, HS, Kt + j0, T_, bq, bk, HS);
          online_softmax_update(S, O, m, l, V + j0 * HS, bq, bk, HS, i0 - j0);
        }
        for (int64_t r = 0; r < bq; ++r) {
          const float inv = 1.0f / l[r];
          T* orow = out + q_off + (i0 + r) * d.NH * HS;
          for (int64_t x = 0; x < HS; ++x) st(&orow[x], O[r * HS + x] * inv);
          lse[bh * T_ + i0 + r] = m[r] + std::log(l[r]);
        }
      }
    }
  }
}

template <typename T>
void backward_impl(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                   const T* out, const float* lse, const AttnDims& d) {
  const int64_t T_ = d.T, HS = d.HS, group = d.NH / d.NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel
  {
    float* K = scratch(0, T_ * HS);
    float* Kt = scratch(1, HS * T_);
    float* Vt = scratch(2, HS * T_);
    float* Q = scratch(3, 2 * T_ * HS + T_);  // Q, dO, D
    float* dO = Q + T_ * HS;
    float* D = dO + T_ * HS;
    float* acc = scratch(4, 3 * T_ * HS);  // dQ, dK, dV
    float* dQ = acc;
    float* dK = acc + T_ * HS;
    float* dV = acc + 2 * T_ * HS;
    float* P = scratch(5, 2 * kBq * kBk);
    float* dS = P + kBq * kBk;
#pragma omp for schedule(dynamic, 1)
    for (int64_t bkv = 0; bkv < d.B * d.NKV; ++bkv) {
      int64_t b = bkv / d.NKV, kvh = bkv % d.NKV;
      const int64_t kv_off = (b * T_ * d.NKV + kvh) * HS;
      gather(K, k + kv_off, T_, HS, d.NKV * HS, 1.0f);
      gather_transposed(Kt, k + kv_off, T_, HS, d.NKV * HS);
      gather_transposed(Vt, v + kv_off, T_, HS, d.NKV * HS);
      for (int64_t x = 0; x < 2 * T_ * HS; ++x) dK[x] = 0.0f;  // dK and dV
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const int64_t q_off = (b * T_ * d.NH + h) * HS;
        const float* lrow = lse + (b * d.NH + h) * T_;
        gather(Q, q + q_off, T_, HS, d.NH * HS, 1.0f);
        gather(dO, dout + q_off, T_, HS, d.NH * HS, 1.0f);
        for (int64_t t = 0; t < T_; ++t) {
          const T* orow = out + q_off + t * d.NH * HS;
          float s = 0;
          for (int64_t x = 0; x < HS; ++x) s += dO[t * HS + x] * ld(&orow[x]);
          D[t] = s;
        }
        for (int64_t x = 0; x < T_ * HS; ++x) dQ[x] = 0.0f;
        for (int64_t j0 = 0; j0 < T_; j0 += kBk) {
          const int64_t bk = std::min(kBk, T_ - j0);
          for (int64_t i0 = (j0 / kBq) * kBq; i0 < T_; i0 += kBq) {
            const int64_t bq = std::min(kBq, T_ - i0);
            if (i0 + bq <= j0) continue;  // block entirely above the diagonal
            tile_scores(P, Q + i0 * HS, HS, Kt + j0, T_, bq, bk, HS);
            tile_probs(P, lrow + i0, scale, bq, bk, i0 - j0);
            tile_acc_tn(dV + j0 * HS, P, dO + i0 * HS, bq, bk, HS);
            tile_scores(dS, dO + i0 * HS, HS, Vt + j0, T_, bq, bk, HS);
            tile_dscores(dS, P, D + i0, scale, bq, bk);
            tile_acc_nn(dQ + i0 * HS, dS, K + j0 * HS, bq, bk, HS);
            tile_acc_tn(dK + j0 * HS, dS, Q + i0 * HS, bq, bk, HS);
          }
        }
        if (dq) {
          for (int64_t t = 0; t < T_; ++t) add_row(dq + q_off + t * d.NH * HS, dQ + t * HS, HS);
        }
      }
      for (int64_t t = 0; t < T_; ++t) {
        if (dk) add_row(dk + kv_off + t * d.NKV * HS, dK + t * HS, HS);
        if (dv) add_row(dv + kv_off + t * d.NKV * HS, dV + t * HS, HS);
      }
    }
  }
}

}  // namespace

void attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k,
                       const Tensor& v) {
  const char* op = "attention_forward";
  check_cpu(op, {&out, &lse, &q, &k, &v});
  AttnDims d = check_attention(op, q, k, v);
  check_same_dtype(op, "out", out, "q", q);
  check_shape(op, "out", out, q.shape());
  check_dtype(op, "lse", lse, DType::f32);
  check_shape(op, "lse", lse, Shape{d.B, d.NH, d.T});
  dispatch_float(q.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    forward_impl<T>(out.data<T>(), lse.data<float>(), q.data<T>(), k.data<T>(), v.data<T>(), d);
  });
}

void attention_backward(Tensor* dq, Tensor* dk, Tensor* dv, const Tensor& dout, const Tensor& q,
                        const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse) {
  const char* op = "attention_backward";
  check_cpu(op, {dq, dk, dv, &dout, &q, &k, &v, &out, &lse});
  AttnDims d = check_attention(op, q, k, v);
  check_same_dtype(op, "dout", dout, "q", q);
  check_shape(op, "dout", dout, q.shape());
  check_same_dtype(op, "out", out, "q", q);
  check_shape(op, "out", out, q.shape());
  check_dtype(op, "lse", lse, DType::f32);
  check_shape(op, "lse", lse, Shape{d.B, d.NH, d.T});
  if (dq) check_same_dtype(op, "dq", *dq, "q", q), check_shape(op, "dq", *dq, q.shape());
  if (dk) check_same_dtype(op, "dk", *dk, "k", k), check_shape(op, "dk", *dk, k.shape());
  if (dv) check_same_dtype(op, "dv", *dv, "v", v), check_shape(op, "dv", *dv, v.shape());
  if (!dq && !dk && !dv) return;
  dispatch_float(q.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    backward_impl<T>(dq ? dq->data<T>() : nullptr, dk ? dk->data<T>() : nullptr,
                     dv ? dv->data<T>() : nullptr, dout.data<T>(), q.data<T>(), k.data<T>(),
                     v.data<T>(), out.data<T>(), lse.data<float>(), d);
  });
}

}  // namespace braid::kernels
