// bf16 flash attention on vdpbf16ps tiles (Note [bf16 attention tiles], attention_bf16.h): the
// f32 kernels' loops (cpu/attention.cpp) with the tile products on AVX-512 BF16.
#include <algorithm>
#include <cmath>

#include "braid/kernels/cpu/attention_bf16.h"
#include "braid/kernels/cpu/attention_dims.h"

namespace braid::kernels::cpu {

#ifdef __AVX512BF16__
// forward_impl for bf16 on vdpbf16ps tiles (Note [bf16 attention tiles]).
void forward_bf16(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                  const AttnDims& d) {
  const int64_t Tq = d.Tq, Tk = d.Tk, HS = d.HS, group = d.NH / d.NKV;
  const int64_t Tqp = round_up(Tq, kTile), Tkp = round_up(Tk, kTile), HSp = round_up(HS, 16);
  const int64_t HW = HSp / 2;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const TeamScratch<uint32_t> Q_s(0, Tqp * HW), Kw_s(1, HW * Tkp), Vp_s(2, Tkp / 2 * HSp);
  const TeamScratch<float> S_s(3, kTile * kTile + kTile * HSp + 2 * kTile);
  const TeamScratch<uint32_t> P_s(4, kTile * kTile / 2);
#pragma omp parallel
  {
    uint32_t* Q = Q_s.mine();
    uint32_t* Kw = Kw_s.mine();
    uint32_t* Vp = Vp_s.mine();
    float* S = S_s.mine();
    float* O = S + kTile * kTile;
    float* m = O + kTile * HSp;
    float* l = m + kTile;
    uint32_t* Pb = P_s.mine();
    int64_t loaded = -1;  // (b * NKV + kvh) whose K/V panels are loaded
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < d.B * d.NH; ++bh) {
      int64_t b = bh / d.NH, h = bh % d.NH, kvh = h / group;
      if (loaded != b * d.NKV + kvh) {
        const int64_t kv_off = d.kv_off(b, kvh);
        pack_words_t(Kw, k + kv_off, Tk, HS, d.kv_rs, Tkp, HSp);
        pack_pair_rows(Vp, v + kv_off, Tk, HS, d.kv_rs, Tkp, HSp);
        loaded = b * d.NKV + kvh;
      }
      const int64_t o_off = d.o_off(b, h);
      pack_rows(Q, q + d.q_off(b, h), Tq, HS, d.q_rs, Tqp, HSp);
      for (int64_t i0 = 0; i0 < Tq; i0 += kTile) {
        const int64_t bq = std::min(kTile, Tq - i0);
        for (int64_t r = 0; r < kTile; ++r) m[r] = -INFINITY, l[r] = 0.0f;
        for (int64_t x = 0; x < kTile * HSp; ++x) O[x] = 0.0f;
        for (int64_t j0 = 0; j0 < d.key_end(i0, bq); j0 += kTile) {
          const int64_t bk = std::min(kTile, Tk - j0);
          dot_tile<false>(S, kTile, Q + i0 * HW, HW, 1, Kw + j0, Tkp, HW, kTile, scale);
          online_softmax_step(S, O, m, l, bq, bk, HSp, d.diag(i0, j0));
          tile_round(Pb, S);
          dot_tile<true>(O, HSp, Pb, kTile / 2, 1, Vp + j0 / 2 * HSp, HSp, kTile / 2, HSp);
        }
        for (int64_t r = 0; r < bq; ++r) {
          const float inv = 1.0f / l[r];
          float ob[kBlock];
          bf16* orow = out + o_off + (i0 + r) * d.o_rs();
          for (int64_t x0 = 0; x0 < HS; x0 += kBlock) {  // Note [Blocked loops]
            const int64_t w = std::min(kBlock, HS - x0);
            for (int64_t x = 0; x < w; ++x) ob[x] = O[r * HSp + x0 + x] * inv;
            store_row(orow + x0, ob, w);
          }
          lse[bh * Tq + i0 + r] = m[r] + std::log(l[r]);
        }
      }
    }
  }
}

// backward_impl for bf16 on vdpbf16ps tiles (Note [bf16 attention tiles]).
void backward_bf16(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k,
                   const bf16* v, const bf16* out, const float* lse, const AttnDims& d) {
  const int64_t Tq = d.Tq, Tk = d.Tk, HS = d.HS, group = d.NH / d.NKV;
  const int64_t Tqp = round_up(Tq, kTile), Tkp = round_up(Tk, kTile), HSp = round_up(HS, 16);
  const int64_t HW = HSp / 2;
  // words of one packed [Tqp, HSp] or [Tkp, HSp] panel, in any layout
  const int64_t q_panel = Tqp * HW, k_panel = Tkp * HW;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const TeamScratch<uint32_t> kv_s(0, 3 * k_panel);           // Kw, Kp, Vw
  const TeamScratch<uint32_t> q_s(1, 4 * q_panel);            // Q, Qp, dO, dOp
  const TeamScratch<float> D_s(2, Tqp + 2 * kTile * kTile);   // D, P, dS
  const TeamScratch<float> acc_s(3, (Tqp + 2 * Tkp) * HSp);   // dQ, dK, dV
  const TeamScratch<uint32_t> t_s(4, 3 * kTile * kTile / 2);  // P^T, dS, dS^T pairs
#pragma omp parallel
  {
    uint32_t* Kw = kv_s.mine();
    uint32_t* Kp = Kw + k_panel;
    uint32_t* Vw = Kp + k_panel;
    uint32_t* Q = q_s.mine();
    uint32_t* Qp = Q + q_panel;
    uint32_t* dO = Qp + q_panel;
    uint32_t* dOp = dO + q_panel;
    float* D = D_s.mine();
    float* P = D + Tqp;
    float* dS = P + kTile * kTile;
    float* dQ = acc_s.mine();
    float* dK = dQ + Tqp * HSp;
    float* dV = dK + Tkp * HSp;
    uint32_t* Pt = t_s.mine();
    uint32_t* dSb = Pt + kTile * kTile / 2;
    uint32_t* dSt = dSb + kTile * kTile / 2;
#pragma omp for schedule(dynamic, 1)
    for (int64_t bkv = 0; bkv < d.B * d.NKV; ++bkv) {
      int64_t b = bkv / d.NKV, kvh = bkv % d.NKV;
      const int64_t kv_off = d.kv_off(b, kvh), kv_stride = d.kv_rs;
      pack_words_t(Kw, k + kv_off, Tk, HS, kv_stride, Tkp, HSp);
      pack_pair_rows(Kp, k + kv_off, Tk, HS, kv_stride, Tkp, HSp);
      pack_words_t(Vw, v + kv_off, Tk, HS, kv_stride, Tkp, HSp);
      for (int64_t x = 0; x < 2 * Tkp * HSp; ++x) dK[x] = 0.0f;  // dK and dV
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const int64_t q_off = d.q_off(b, h), q_stride = d.q_rs;
        const int64_t o_off = d.o_off(b, h), o_stride = d.o_rs();
        const float* lrow = lse + (b * d.NH + h) * Tq;
        pack_rows(Q, q + q_off, Tq, HS, q_stride, Tqp, HSp);
        pack_pair_rows(Qp, q + q_off, Tq, HS, q_stride, Tqp, HSp);
        pack_rows(dO, dout + o_off, Tq, HS, o_stride, Tqp, HSp);
        pack_pair_rows(dOp, dout + o_off, Tq, HS, o_stride, Tqp, HSp);
        for (int64_t t = 0; t < Tqp; ++t) {
          float s = 0;
          if (t < Tq) {
            const bf16* orow = out + o_off + t * o_stride;
            const bf16* grow = dout + o_off + t * o_stride;
#pragma omp simd reduction(+ : s)
            for (int64_t x = 0; x < HS; ++x) s += ld(grow + x) * ld(orow + x);
          }
          D[t] = s;
        }
        for (int64_t x = 0; x < Tqp * HSp; ++x) dQ[x] = 0.0f;
        for (int64_t j0 = 0; j0 < Tk; j0 += kTile) {
          const int64_t bk = std::min(kTile, Tk - j0);
          for (int64_t i0 = d.query_begin(j0); i0 < Tq; i0 += kTile) {
            const int64_t bq = std::min(kTile, Tq - i0);
            dot_tile<false>(P, kTile, Q + i0 * HW, HW, 1, Kw + j0, Tkp, HW, kTile);
            tile_probs(P, lrow + i0, scale, bq, bk, d.diag(i0, j0));
            tile_round_t(Pt, P);
            dot_tile<true>(dV + j0 * HSp, HSp, Pt, 1, kTile, dOp + i0 / 2 * HSp, HSp, kTile / 2,
                           HSp);
            dot_tile<false>(dS, kTile, dO + i0 * HW, HW, 1, Vw + j0, Tkp, HW, kTile);
            tile_dscores(dS, P, D + i0, scale);
            tile_round(dSb, dS);
            tile_round_t(dSt, dS);
            dot_tile<true>(dQ + i0 * HSp, HSp, dSb, kTile / 2, 1, Kp + j0 / 2 * HSp, HSp, kTile / 2,
                           HSp);
            dot_tile<true>(dK + j0 * HSp, HSp, dSt, 1, kTile, Qp + i0 / 2 * HSp, HSp, kTile / 2,
                           HSp);
          }
        }
        if (dq) {
          for (int64_t t = 0; t < Tq; ++t) d.put_grad(dq + q_off + t * q_stride, dQ + t * HSp, HS);
        }
      }
      for (int64_t t = 0; t < Tk; ++t) {
        if (dk) d.put_grad(dk + kv_off + t * kv_stride, dK + t * HSp, HS);
        if (dv) d.put_grad(dv + kv_off + t * kv_stride, dV + t * HSp, HS);
      }
    }
  }
}
#endif  // __AVX512BF16__

}  // namespace braid::kernels::cpu
