// Self-attention, flash style (FlashAttention-2 on CPU tiles), with GQA; causal, or with no
// mask over a separate key sequence (a key block of ring attention, Note [Attention over key
// blocks] in ops.h).
//   q[B,Tq,NH,HS], k[B,Tk,NKV,HS], v[B,Tk,NKV,HS], out[B,Tq,NH,HS], lse[B,NH,Tq] f32 (causal:
//   Tq == Tk); query head h reads key/value head h / (NH/NKV); scale = 1/sqrt(HS).
// Forward, per (b,h): the head's rows are gathered into contiguous f32 panels (Q scaled,
//   K transposed to [HS,Tk], V; padded, see attention_tiles.h), then each query block of 64
//   rows walks the key blocks of 64 columns (causal: those at or below the diagonal; else
//   all) with an online softmax (running max m, sum l); out = O / l, lse = m + log l. Only a
//   64 x 64 tile of scores exists at any time.
// Backward, per (b, kv head) so dk/dv have one writer: for each query head of the group,
//   D_i = rowsum(dO_i * O_i); for each key block j and query block i (causal: i >= j) the
//   probabilities are recomputed, P = exp(S - lse), then dV_j += P^T dO_i, dP = dO_i V_j^T,
//   dS = P (dP - D) * scale, dQ_i += dS K_j, dK_j += dS^T Q_i.
// Per-thread memory: a few [Tq,HS] and [Tk,HS] panels and 64 x 64 tiles, reserved for every
// team thread by the calling thread before the parallel region (TeamScratch, Note [Kernel
// scratch]); kernels/scratch_plan.h mirrors the requests.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "braid/kernels/cpu/attention_dims.h"
#include "braid/kernels/cpu/attention_tiles.h"
#include "braid/kernels/cpu/common.h"
#include "braid/kernels/device.h"
#include "braid/kernels/ops.h"

namespace braid::kernels {

using namespace cpu;

namespace {

AttnDims check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                         bool causal) {
  check_float(op, "q", q);
  check_same_dtype(op, "k", k, "q", q);
  check_same_dtype(op, "v", v, "q", q);
  BRAID_CHECK(q.dim() == 4 && k.dim() == 4, op, ": q ", q.shape().str(), " and k ", k.shape().str(),
              " must be [B,Tq,NH,HS] and [B,Tk,NKV,HS]");
  AttnDims d{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3), causal};
  BRAID_CHECK(k.size(0) == d.B && k.size(3) == d.HS && (!causal || d.Tk == d.Tq), op, ": k ",
              k.shape().str(), " does not match q ", q.shape().str(),
              causal ? " (causal: Tk == Tq)" : "");
  BRAID_CHECK(causal || d.Tk > 0 || d.Tq == 0, op, ": non-causal attention of Tq=", d.Tq,
              " queries needs at least one key, got Tk=0");
  check_shape(op, "v", v, k.shape());
  BRAID_CHECK(d.NKV > 0 && d.NH % d.NKV == 0, op, ": NH=", d.NH,
              " query heads is not a multiple of NKV=", d.NKV, " key/value heads");
  return d;
}

// dst[Tp,HSp] (f32, zero-padded) = src rows t*stride (head offset applied) * mul.
template <typename T>
void gather(float* dst, const T* src, int64_t T_, int64_t HS, int64_t stride, float mul, int64_t Tp,
            int64_t HSp) {
  for (int64_t t = 0; t < Tp; ++t) {
    float* d = dst + t * HSp;
    int64_t valid = t < T_ ? HS : 0;
    load_row(d, src + t * stride, valid);
    if (mul != 1.0f)
      for (int64_t x = 0; x < valid; ++x) d[x] *= mul;
    for (int64_t x = valid; x < HSp; ++x) d[x] = 0.0f;
  }
}

// dst[HSp,Tp] (zero-padded) = src^T (src rows t*stride). Blocks of 16 rows keep the reads
// in a few cache lines and make every write a contiguous 16-float run.
template <typename T>
requires std::is_same_v<T, float>
void gather_transposed(float* dst, const T* src, int64_t T_, int64_t HS, int64_t stride, int64_t Tp,
                       int64_t HSp) {
#ifdef __AVX512F__
  if (HS == HSp)  // Note [Vector packing] (attention_bf16.h)
    return transpose_panel(reinterpret_cast<uint32_t*>(dst), reinterpret_cast<const uint32_t*>(src),
                           T_, stride, HS, Tp);
#endif
  for (int64_t t0 = 0; t0 < Tp; t0 += 16) {
    const int64_t nt = std::max<int64_t>(0, std::min<int64_t>(16, T_ - t0));
    for (int64_t x = 0; x < HSp; ++x) {
      float* d = dst + x * Tp + t0;
      if (x < HS) {
        for (int64_t t = 0; t < nt; ++t) d[t] = ld(&src[(t0 + t) * stride + x]);
        for (int64_t t = nt; t < 16; ++t) d[t] = 0.0f;
      } else {
        for (int64_t t = 0; t < 16; ++t) d[t] = 0.0f;
      }
    }
  }
}
// bf16/f16: the 16 rows are widened 64 columns at a time first (Note [Blocked loops]).
template <typename T>
requires(!std::is_same_v<T, float>) void gather_transposed(float* dst, const T* src, int64_t T_,
                                                           int64_t HS, int64_t stride, int64_t Tp,
                                                           int64_t HSp) {
  for (int64_t t0 = 0; t0 < Tp; t0 += 16) {
    const int64_t nt = std::max<int64_t>(0, std::min<int64_t>(16, T_ - t0));
    for (int64_t x0 = 0; x0 < HSp; x0 += 64) {
      const int64_t w = std::max<int64_t>(0, std::min<int64_t>(64, HS - x0));
      float tile[16][64];
      for (int64_t t = 0; t < nt; ++t) load_row(tile[t], src + (t0 + t) * stride + x0, w);
      for (int64_t x = x0; x < std::min<int64_t>(HSp, x0 + 64); ++x) {
        float* d = dst + x * Tp + t0;
        const int64_t live = x < HS ? nt : 0;
        for (int64_t t = 0; t < live; ++t) d[t] = tile[t][x - x0];
        for (int64_t t = live; t < 16; ++t) d[t] = 0.0f;
      }
    }
  }
}

template <typename T>
void forward_impl(T* out, float* lse, const T* q, const T* k, const T* v, const AttnDims& d) {
  const int64_t Tq = d.Tq, Tk = d.Tk, HS = d.HS, group = d.NH / d.NKV;
  const int64_t Tqp = round_up(Tq, kTile), Tkp = round_up(Tk, kTile), HSp = round_up(HS, 16);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const TeamScratch<float> Q_s(0, Tqp * HSp), Kt_s(1, HSp * Tkp), V_s(2, Tkp * HSp);
  const TeamScratch<float> S_s(3, kTile * kTile + kTile * HSp + 2 * kTile);
#pragma omp parallel
  {
    float* Q = Q_s.mine();
    float* Kt = Kt_s.mine();
    float* V = V_s.mine();
    float* S = S_s.mine();
    float* O = S + kTile * kTile;
    float* m = O + kTile * HSp;
    float* l = m + kTile;
    int64_t loaded = -1;  // (b * NKV + kvh) whose K/V panels are loaded
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < d.B * d.NH; ++bh) {
      int64_t b = bh / d.NH, h = bh % d.NH, kvh = h / group;
      if (loaded != b * d.NKV + kvh) {
        const int64_t kv_off = d.kv_off(b, kvh);
        gather_transposed(Kt, k + kv_off, Tk, HS, d.kv_rs, Tkp, HSp);
        gather(V, v + kv_off, Tk, HS, d.kv_rs, 1.0f, Tkp, HSp);
        loaded = b * d.NKV + kvh;
      }
      const int64_t o_off = d.o_off(b, h);
      gather(Q, q + d.q_off(b, h), Tq, HS, d.q_rs, scale, Tqp, HSp);
      for (int64_t i0 = 0; i0 < Tq; i0 += kTile) {
        const int64_t bq = std::min(kTile, Tq - i0);
        for (int64_t r = 0; r < kTile; ++r) m[r] = -INFINITY, l[r] = 0.0f;
        for (int64_t x = 0; x < kTile * HSp; ++x) O[x] = 0.0f;
        for (int64_t j0 = 0; j0 < d.key_end(i0, bq); j0 += kTile) {
          const int64_t bk = std::min(kTile, Tk - j0);
          tile_scores(S, Q + i0 * HSp, HSp, Kt + j0, Tkp, HSp);
          online_softmax_step(S, O, m, l, bq, bk, HSp, d.diag(i0, j0));
          tile_acc_nn(O, S, V + j0 * HSp, HSp);
        }
        for (int64_t r = 0; r < bq; ++r) {
          const float inv = 1.0f / l[r];
          T* orow = out + o_off + (i0 + r) * d.o_rs();
          for (int64_t x0 = 0; x0 < HS; x0 += kBlock) {  // Note [Blocked loops]
            const int64_t w = std::min(kBlock, HS - x0);
            float ob[kBlock];
            float* ov = f32_out(orow + x0, ob);
            for (int64_t x = 0; x < w; ++x) ov[x] = O[r * HSp + x0 + x] * inv;
            commit(orow + x0, ov, w);
          }
          lse[bh * Tq + i0 + r] = m[r] + std::log(l[r]);
        }
      }
    }
  }
}

template <typename T>
void backward_impl(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                   const T* out, const float* lse, const AttnDims& d) {
  const int64_t Tq = d.Tq, Tk = d.Tk, HS = d.HS, group = d.NH / d.NKV;
  const int64_t Tqp = round_up(Tq, kTile), Tkp = round_up(Tk, kTile), HSp = round_up(HS, 16);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const TeamScratch<float> K_s(0, Tkp * HSp), Kt_s(1, HSp * Tkp), Vt_s(2, HSp * Tkp);
  const TeamScratch<float> Q_s(3, 2 * Tqp * HSp + Tqp);      // Q, dO, D
  const TeamScratch<float> acc_s(4, (Tqp + 2 * Tkp) * HSp);  // dQ, dK, dV
  const TeamScratch<float> P_s(5, 2 * kTile * kTile);        // P, dS
#pragma omp parallel
  {
    float* K = K_s.mine();
    float* Kt = Kt_s.mine();
    float* Vt = Vt_s.mine();
    float* Q = Q_s.mine();
    float* dO = Q + Tqp * HSp;
    float* D = dO + Tqp * HSp;
    float* dQ = acc_s.mine();
    float* dK = dQ + Tqp * HSp;
    float* dV = dK + Tkp * HSp;
    float* P = P_s.mine();
    float* dS = P + kTile * kTile;
#pragma omp for schedule(dynamic, 1)
    for (int64_t bkv = 0; bkv < d.B * d.NKV; ++bkv) {
      int64_t b = bkv / d.NKV, kvh = bkv % d.NKV;
      const int64_t kv_off = d.kv_off(b, kvh);
      gather(K, k + kv_off, Tk, HS, d.kv_rs, 1.0f, Tkp, HSp);
      gather_transposed(Kt, k + kv_off, Tk, HS, d.kv_rs, Tkp, HSp);
      gather_transposed(Vt, v + kv_off, Tk, HS, d.kv_rs, Tkp, HSp);
      for (int64_t x = 0; x < 2 * Tkp * HSp; ++x) dK[x] = 0.0f;  // dK and dV
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const int64_t q_off = d.q_off(b, h), o_off = d.o_off(b, h);
        const float* lrow = lse + (b * d.NH + h) * Tq;
        gather(Q, q + q_off, Tq, HS, d.q_rs, 1.0f, Tqp, HSp);
        gather(dO, dout + o_off, Tq, HS, d.o_rs(), 1.0f, Tqp, HSp);
        for (int64_t t = 0; t < Tqp; ++t) {
          float s = 0;
          if (t < Tq) {
            const T* orow = out + o_off + t * d.o_rs();
            for (int64_t x0 = 0; x0 < HS; x0 += kBlock) {  // in order: the same sum for any T
              const int64_t w = std::min(kBlock, HS - x0);
              float ob[kBlock];
              const auto ov = f32_in(orow + x0, w, ob);
#pragma omp simd reduction(+ : s)
              for (int64_t x = 0; x < w; ++x) s += dO[t * HSp + x0 + x] * ov[x];
            }
          }
          D[t] = s;
        }
        for (int64_t x = 0; x < Tqp * HSp; ++x) dQ[x] = 0.0f;
        for (int64_t j0 = 0; j0 < Tk; j0 += kTile) {
          const int64_t bk = std::min(kTile, Tk - j0);
          for (int64_t i0 = d.query_begin(j0); i0 < Tq; i0 += kTile) {
            const int64_t bq = std::min(kTile, Tq - i0);
            tile_scores(P, Q + i0 * HSp, HSp, Kt + j0, Tkp, HSp);
            tile_probs(P, lrow + i0, scale, bq, bk, d.diag(i0, j0));
            tile_acc_tn(dV + j0 * HSp, P, dO + i0 * HSp, HSp);
            tile_scores(dS, dO + i0 * HSp, HSp, Vt + j0, Tkp, HSp);
            tile_dscores(dS, P, D + i0, scale);
            tile_acc_nn(dQ + i0 * HSp, dS, K + j0 * HSp, HSp);
            tile_acc_tn(dK + j0 * HSp, dS, Q + i0 * HSp, HSp);
          }
        }
        if (dq) {
          for (int64_t t = 0; t < Tq; ++t) d.put_grad(dq + q_off + t * d.q_rs, dQ + t * HSp, HS);
        }
      }
      for (int64_t t = 0; t < Tk; ++t) {
        if (dk) d.put_grad(dk + kv_off + t * d.kv_rs, dK + t * HSp, HS);
        if (dv) d.put_grad(dv + kv_off + t * d.kv_rs, dV + t * HSp, HS);
      }
    }
  }
}

// qkv[B,T,(NH + 2 NKV) HS] (Note [Packed qkv]); causal, row strides W.
AttnDims check_packed(const char* op, const Tensor& qkv, int64_t NH, int64_t NKV) {
  check_float(op, "qkv", qkv);
  BRAID_CHECK(qkv.dim() == 3, op, ": qkv must be [B,T,(NH+2NKV)*HS], got ", qkv.shape().str());
  BRAID_CHECK(NH > 0 && NKV > 0 && NH % NKV == 0, op, ": NH=", NH, " query heads must be a ",
              "positive multiple of NKV=", NKV, " key/value heads");
  const int64_t W = qkv.size(2), heads = NH + 2 * NKV;
  BRAID_CHECK(W % heads == 0 && W > 0, op, ": qkv ", qkv.shape().str(), " has ", W,
              " columns, not a multiple of NH + 2 NKV = ", heads);
  AttnDims d{qkv.size(0), qkv.size(1), qkv.size(1), NH, NKV, W / heads, true};
  d.q_rs = d.kv_rs = W;
  return d;
}

// The kernels for T on q, k, v where they lie (the dims' strides).
template <typename T>
void forward_on(T* out, float* lse, const T* q, const T* k, const T* v, const AttnDims& d) {
#ifdef __AVX512BF16__  // Note [bf16 attention tiles]
  if constexpr (std::is_same_v<T, bf16>) return forward_bf16(out, lse, q, k, v, d);
#endif
  forward_impl<T>(out, lse, q, k, v, d);
}
template <typename T>
void backward_on(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                 const T* out, const float* lse, const AttnDims& d) {
#ifdef __AVX512BF16__  // Note [bf16 attention tiles]
  if constexpr (std::is_same_v<T, bf16>)
    return backward_bf16(dq, dk, dv, dout, q, k, v, out, lse, d);
#endif
  backward_impl<T>(dq, dk, dv, dout, q, k, v, out, lse, d);
}

template <typename T>
T* data_or_null(Tensor* t) {
  return t ? t->data<T>() : nullptr;
}

}  // namespace

void attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       bool causal) {
  const char* op = "attention_forward";
  AttnDims d = check_attention(op, q, k, v, causal);
  check_same_dtype(op, "out", out, "q", q);
  check_shape(op, "out", out, q.shape());
  check_dtype(op, "lse", lse, DType::f32);
  check_shape(op, "lse", lse, Shape{d.B, d.NH, d.Tq});
  BRAID_DEVICE_DISPATCH(attention_forward, (out, lse, q, k, v, causal), &out, &lse, &q, &k, &v);
  check_cpu(op, {&out, &lse, &q, &k, &v});
  dispatch_float(q.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    forward_on<T>(out.data<T>(), lse.data<float>(), q.data<T>(), k.data<T>(), v.data<T>(), d);
  });
}

void attention_backward(Tensor* dq, Tensor* dk, Tensor* dv, const Tensor& dout, const Tensor& q,
                        const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        bool causal) {
  const char* op = "attention_backward";
  AttnDims d = check_attention(op, q, k, v, causal);
  check_same_dtype(op, "dout", dout, "q", q);
  check_shape(op, "dout", dout, q.shape());
  check_same_dtype(op, "out", out, "q", q);
  check_shape(op, "out", out, q.shape());
  check_dtype(op, "lse", lse, DType::f32);
  check_shape(op, "lse", lse, Shape{d.B, d.NH, d.Tq});
  if (dq) check_same_dtype(op, "dq", *dq, "q", q), check_shape(op, "dq", *dq, q.shape());
  if (dk) check_same_dtype(op, "dk", *dk, "k", k), check_shape(op, "dk", *dk, k.shape());
  if (dv) check_same_dtype(op, "dv", *dv, "v", v), check_shape(op, "dv", *dv, v.shape());
  BRAID_DEVICE_DISPATCH(attention_backward, (dq, dk, dv, dout, q, k, v, out, lse, causal), dq, dk,
                        dv, &dout, &q, &k, &v, &out, &lse);
  check_cpu(op, {dq, dk, dv, &dout, &q, &k, &v, &out, &lse});
  if (!dq && !dk && !dv) return;
  dispatch_float(q.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    backward_on<T>(data_or_null<T>(dq), data_or_null<T>(dk), data_or_null<T>(dv), dout.data<T>(),
                   q.data<T>(), k.data<T>(), v.data<T>(), out.data<T>(), lse.data<float>(), d);
  });
}

// Note [Packed qkv]: GPT-2's attention input is one projection, qkv[B,T,(NH + 2 NKV) HS], each
// row q | k | v. Splitting it into three tensors for the kernels cost a copy of each in the
// forward and, in the backward, zeroed dq, dk, dv and a zeroed dqkv that three column adds
// filled (bench-small bf16: copy_columns 1.25 and add_columns 4.63 ms of a 580 ms step, and
// the zeroing between the ops). The kernels gather every head's rows into panels anyway, so
// they read q, k and v where they lie in qkv (a row stride of W elements instead of NH HS) and
// write each gradient row of the head they computed straight into dqkv: every row of every
// head is written once, so a fresh dqkv is set, not zeroed and added into. The arithmetic is
// the split kernels' in the same order: the results are theirs bit for bit.

void attention_forward_qkv(Tensor& out, Tensor& lse, const Tensor& qkv, int64_t n_head,
                           int64_t n_kv_head) {
  const char* op = "attention_forward_qkv";
  AttnDims d = check_packed(op, qkv, n_head, n_kv_head);
  check_same_dtype(op, "out", out, "qkv", qkv);
  check_shape(op, "out", out, Shape{d.B, d.Tq, d.NH, d.HS});
  check_dtype(op, "lse", lse, DType::f32);
  check_shape(op, "lse", lse, Shape{d.B, d.NH, d.Tq});
  BRAID_DEVICE_DISPATCH(attention_forward_qkv, (out, lse, qkv, n_head, n_kv_head), &out, &lse,
                        &qkv);
  check_cpu(op, {&out, &lse, &qkv});
  const int64_t k0 = d.NH * d.HS, v0 = (d.NH + d.NKV) * d.HS;
  dispatch_float(qkv.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* p = qkv.data<T>();
    forward_on<T>(out.data<T>(), lse.data<float>(), p, p + k0, p + v0, d);
  });
}

void attention_backward_qkv(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                            const Tensor& lse, int64_t n_head, int64_t n_kv_head, bool accumulate) {
  const char* op = "attention_backward_qkv";
  AttnDims d = check_packed(op, qkv, n_head, n_kv_head);
  const Shape heads{d.B, d.Tq, d.NH, d.HS};
  check_same_dtype(op, "dqkv", dqkv, "qkv", qkv);
  check_shape(op, "dqkv", dqkv, qkv.shape());
  check_same_dtype(op, "dout", dout, "qkv", qkv);
  check_shape(op, "dout", dout, heads);
  check_same_dtype(op, "out", out, "qkv", qkv);
  check_shape(op, "out", out, heads);
  check_dtype(op, "lse", lse, DType::f32);
  check_shape(op, "lse", lse, Shape{d.B, d.NH, d.Tq});
  BRAID_DEVICE_DISPATCH(attention_backward_qkv,
                        (dqkv, dout, qkv, out, lse, n_head, n_kv_head, accumulate), &dqkv, &dout,
                        &qkv, &out, &lse);
  check_cpu(op, {&dqkv, &dout, &qkv, &out, &lse});
  d.accumulate = accumulate;
  const int64_t k0 = d.NH * d.HS, v0 = (d.NH + d.NKV) * d.HS;
  dispatch_float(qkv.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* p = qkv.data<T>();
    T* g = dqkv.data<T>();
    backward_on<T>(g, g + k0, g + v0, dout.data<T>(), p, p + k0, p + v0, out.data<T>(),
                   lse.data<float>(), d);
  });
}

}  // namespace braid::kernels
