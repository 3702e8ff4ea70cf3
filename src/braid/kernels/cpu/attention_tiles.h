// Tile kernels of the flash attention (internal to cpu/attention.cpp).
// Every tile is kTile x kTile (64 x 64) f32 with row stride kTile; panels are f32 with rows
// padded to Tp (a multiple of kTile) and head size padded to HSp (a multiple of 16), the
// padding zero-filled, so the register-blocked micro-kernels below never see ragged edges.
// Row/column masks are applied by writing zeros into the probability tiles.
// diag = i0 - j0 (query block start minus key block start): key c of a tile is visible to
// query row r iff c <= r + diag (causal mask); diag = kNoMask leaves every key visible (a
// non-causal attention). Either way keys c >= n (padding past Tk) and rows r >= m are masked.
// The micro-kernels use GCC vector extensions (16 floats, one AVX-512 register; split into
// narrower registers on other targets): 4 rows x 64 columns of accumulators.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "braid/kernels/cpu/common.h"

#ifdef __AVX512F__
// GCC 12's -W(maybe-)uninitialized inside its own AVX-512 intrinsics (GCC bug 105593, as in
// cpu/convert.cpp; -Wuninitialized at -O2): silenced for that header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace braid::kernels::cpu {

constexpr int64_t kTile = 64;  // query rows and key columns per tile
// A diag under which every key of a tile is visible to every row (r + kNoMask >= kTile - 1).
constexpr int64_t kNoMask = kTile;

typedef float v16 __attribute__((vector_size(64)));

inline v16 vload(const float* p) {
  v16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void vstore(float* p, v16 v) {
  std::memcpy(p, &v, sizeof(v));
}

inline int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

#ifdef __AVX512F__
// out[c] = column c of the 16 x 16 words in[0..15] (rows), by 32-bit, 64-bit and 128-bit
// interleaves.
inline void transpose16(__m512i* out, const __m512i* in) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(in[2 * i], in[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(in[2 * i], in[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // u[4i + j], lane L: rows 4i..4i+3 of column 4L + j
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i x0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44);
    const __m512i x1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xee);
    const __m512i y0 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
    const __m512i y1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xee);
    out[j] = _mm512_shuffle_i32x4(x0, y0, 0x88);
    out[4 + j] = _mm512_shuffle_i32x4(x0, y0, 0xdd);
    out[8 + j] = _mm512_shuffle_i32x4(x1, y1, 0x88);
    out[12 + j] = _mm512_shuffle_i32x4(x1, y1, 0xdd);
  }
}

// dst[c * Tp + t] = src[t * stride + c] for c < width (a multiple of 8) and t < rows, zero for
// rows <= t < Tp (a multiple of 16): a panel of 32-bit words (f32, or bf16 pairs) transposed 16 x
// 16 at a time (Note [Vector packing], attention_bf16.h).
inline void transpose_panel(uint32_t* dst, const uint32_t* src, int64_t rows, int64_t stride,
                            int64_t width, int64_t Tp) {
  for (int64_t t0 = 0; t0 < Tp; t0 += 16)
    for (int64_t c0 = 0; c0 < width; c0 += 16) {
      const int64_t w = std::min<int64_t>(16, width - c0);  // 8 or 16 words
      const __mmask16 mask = static_cast<__mmask16>((1u << w) - 1);
      __m512i in[16], out[16];
      for (int64_t i = 0; i < 16; ++i)
        in[i] = t0 + i < rows ? _mm512_maskz_loadu_epi32(mask, src + (t0 + i) * stride + c0)
                              : _mm512_setzero_si512();
      transpose16(out, in);
      for (int64_t c = 0; c < w; ++c) _mm512_storeu_si512(dst + (c0 + c) * Tp + t0, out[c]);
    }
}
#endif

// S[64,64] = A[64 rows, HSp] (row stride lda) @ Bt[HSp rows, 64 cols] (row stride ldb)
inline void tile_scores(float* __restrict S, const float* __restrict A, int64_t lda,
                        const float* __restrict Bt, int64_t ldb, int64_t HSp) {
  for (int64_t r = 0; r < kTile; r += 4) {
    v16 acc[4][4] = {};
    const float* a = A + r * lda;
    for (int64_t d = 0; d < HSp; ++d) {
      const float* b = Bt + d * ldb;
      v16 b0 = vload(b), b1 = vload(b + 16), b2 = vload(b + 32), b3 = vload(b + 48);
      for (int i = 0; i < 4; ++i) {
        const float ai = a[i * lda + d];
        acc[i][0] += ai * b0;
        acc[i][1] += ai * b1;
        acc[i][2] += ai * b2;
        acc[i][3] += ai * b3;
      }
    }
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) vstore(S + (r + i) * kTile + 16 * j, acc[i][j]);
  }
}

// Columns [x0, x0 + 16 NV) of C[64 rows, HSp] += P[64,64] @ B[64 rows, HSp] (TRANS: P^T).
// NV is a template parameter so the 4 x NV accumulators stay in registers.
template <int NV, bool TRANS>
inline void tile_acc_block(float* __restrict C, const float* __restrict P,
                           const float* __restrict B, int64_t HSp, int64_t x0) {
  for (int64_t r = 0; r < kTile; r += 4) {
    v16 acc[4][NV];
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < NV; ++j) acc[i][j] = vload(C + (r + i) * HSp + x0 + 16 * j);
    for (int64_t c = 0; c < kTile; ++c) {
      const float* b = B + c * HSp + x0;
      v16 bv[NV];
      for (int j = 0; j < NV; ++j) bv[j] = vload(b + 16 * j);
      for (int i = 0; i < 4; ++i) {
        // nn: C[r+i] += P[r+i, c] B[c];  tn: C[r+i] += P[c, r+i] B[c]
        const float pi = TRANS ? P[c * kTile + r + i] : P[(r + i) * kTile + c];
        for (int j = 0; j < NV; ++j) acc[i][j] += pi * bv[j];
      }
    }
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < NV; ++j) vstore(C + (r + i) * HSp + x0 + 16 * j, acc[i][j]);
  }
}

template <bool TRANS>
inline void tile_acc(float* __restrict C, const float* __restrict P, const float* __restrict B,
                     int64_t HSp) {
  for (int64_t x0 = 0; x0 < HSp; x0 += 64) {
    switch (std::min<int64_t>(4, (HSp - x0) / 16)) {
      case 4:
        tile_acc_block<4, TRANS>(C, P, B, HSp, x0);
        break;
      case 3:
        tile_acc_block<3, TRANS>(C, P, B, HSp, x0);
        break;
      case 2:
        tile_acc_block<2, TRANS>(C, P, B, HSp, x0);
        break;
      default:
        tile_acc_block<1, TRANS>(C, P, B, HSp, x0);
        break;
    }
  }
}

// C[64 rows, HSp] += P[64,64] @ B[64 rows, HSp]   (C, B row stride HSp)
inline void tile_acc_nn(float* __restrict C, const float* __restrict P, const float* __restrict B,
                        int64_t HSp) {
  tile_acc<false>(C, P, B, HSp);
}

// C[64 rows, HSp] += P[64,64]^T @ B[64 rows, HSp]  (C[c,:] += sum_r P[r,c] B[r,:])
inline void tile_acc_tn(float* __restrict C, const float* __restrict P, const float* __restrict B,
                        int64_t HSp) {
  tile_acc<true>(C, P, B, HSp);
}

// Number of visible keys of row r in a tile of n keys.
inline int64_t visible(int64_t r, int64_t n, int64_t diag) {
  int64_t v = r + diag + 1;
  return v < 0 ? 0 : (v > n ? n : v);
}

// One online-softmax step of the forward over a tile of m valid query rows and n valid keys:
// S holds scaled scores and becomes the probabilities exp(S - new max) (0 where masked or
// padded); the running max mx, sum l and the output rows O[m, HSp] are rescaled.
inline void online_softmax_step(float* __restrict S, float* __restrict O, float* mx, float* l,
                                int64_t m, int64_t n, int64_t HSp, int64_t diag) {
  for (int64_t r = 0; r < kTile; ++r) {
    float* s = S + r * kTile;
    const int64_t nv = r < m ? visible(r, n, diag) : 0;
    if (nv == 0) {
      for (int64_t c = 0; c < kTile; ++c) s[c] = 0.0f;
      continue;
    }
    // over the whole row, masked keys as -inf: a fixed trip count vectorises (a loop to nv ran
    // one vmaxss at a time); max is exact, so the same bits
    float row_max = mx[r];
#pragma omp simd reduction(max : row_max)
    for (int64_t c = 0; c < kTile; ++c) row_max = std::max(row_max, c < nv ? s[c] : -INFINITY);
    const float alpha = fast_exp(mx[r] - row_max);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < kTile; ++c) {
      const float p = c < nv ? fast_exp(s[c] - row_max) : 0.0f;
      s[c] = p;
      sum += p;
    }
    mx[r] = row_max;
    l[r] = l[r] * alpha + sum;
    float* o = O + r * HSp;
#pragma omp simd
    for (int64_t x = 0; x < HSp; ++x) o[x] *= alpha;
  }
}

// P = exp(S * scale - lse[r]) where visible (r < m, c < n, c <= r + diag), 0 elsewhere; in place.
inline void tile_probs(float* __restrict P, const float* lse, float scale, int64_t m, int64_t n,
                       int64_t diag) {
  for (int64_t r = 0; r < kTile; ++r) {
    const int64_t nv = r < m ? visible(r, n, diag) : 0;
    float* p = P + r * kTile;
    const float l = r < m ? lse[r] : 0.0f;
#pragma omp simd
    for (int64_t c = 0; c < kTile; ++c) p[c] = c < nv ? fast_exp(p[c] * scale - l) : 0.0f;
  }
}

// dS = P * (dP - D[r]) * scale (dP given in dS, in place; rows >= m have P = 0).
inline void tile_dscores(float* __restrict dS, const float* __restrict P, const float* D,
                         float scale) {
  for (int64_t r = 0; r < kTile; ++r) {
    float* ds = dS + r * kTile;
    const float* p = P + r * kTile;
    const float dr = D[r];
#pragma omp simd
    for (int64_t c = 0; c < kTile; ++c) ds[c] = p[c] * (ds[c] - dr) * scale;
  }
}

}  // namespace braid::kernels::cpu
