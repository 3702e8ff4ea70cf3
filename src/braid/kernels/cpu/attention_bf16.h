// bf16 flash attention on AVX-512 BF16 dot products (internal to cpu/attention_bf16.cpp).
// Note [bf16 attention tiles]: with T = bf16 the tile products (S = Q K^T, O += P V; backward
// dP = dO V^T, dV += P^T dO, dQ += dS K, dK += dS^T Q) run on vdpbf16ps, which adds the
// products of a pair of bf16 into an f32 lane: operands bf16 (P and dS rounded to bf16 for
// their products, as FlashAttention does on GPUs), accumulators, softmax statistics (max,
// sum-exp, lse), dS and the rescaling f32. Q is not prescaled (Q * scale is not a bf16): the
// scores are scaled in f32. An operand of C[r, x] += sum_k A[r, k] B[k, x] is held as 32-bit
// words, each a pair of bf16 along k (low half the even k):
//   A: word (r, k/2) at A[r * a_rs + k/2 * a_ks], broadcast to every lane;
//   B: "pair rows" [k/2][x], word x = (B[k, x], B[k + 1, x]).
// So Q, dO (A of the scores) are their rows as they come; K, V as B of the scores are
// "word-transposed" [HSp/2][Tp]; V, dO, K, Q as B of the accumulations are pair rows
// [Tp/2][HSp]; P, dS are rounded rows (A of P V, dS K) or transposed pairs [32][64] (A of
// P^T dO, dS^T Q, read with a_rs = 1, a_ks = 64). Padding is zero as in attention_tiles.h.
// Only compiled where the target has AVX512_BF16; elsewhere bf16 takes the f32 tiles.
#pragma once

#ifdef __AVX512BF16__

// GCC 12's -W(maybe-)uninitialized inside its own AVX-512 intrinsics (GCC bug 105593, as in
// cpu/convert.cpp; -Wuninitialized at -O2): silenced for that header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "braid/kernels/cpu/attention_tiles.h"

namespace braid::kernels::cpu {

// Columns [x0, x0 + 16 NV) of C[64 rows] (row stride ldc) (+)= sum_kp A(r, kp) . B[kp]; with
// ACC false C = mul * sum (the scores), else C += sum.
template <int NV, bool ACC>
inline void dot_block(float* __restrict C, int64_t ldc, const uint32_t* __restrict A, int64_t a_rs,
                      int64_t a_ks, const uint32_t* __restrict B, int64_t ldb, int64_t KP,
                      int64_t x0, float mul) {
  for (int64_t r = 0; r < kTile; r += 4) {
    __m512 acc[4][NV];
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < NV; ++j)
        acc[i][j] = ACC ? _mm512_loadu_ps(C + (r + i) * ldc + x0 + 16 * j) : _mm512_setzero_ps();
    const uint32_t* a = A + r * a_rs;
    for (int64_t kp = 0; kp < KP; ++kp) {
      const uint32_t* b = B + kp * ldb + x0;
      __m512bh bv[NV];
      for (int j = 0; j < NV; ++j) bv[j] = (__m512bh)_mm512_loadu_si512(b + 16 * j);
      for (int i = 0; i < 4; ++i) {
        const __m512bh ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[i * a_rs + kp * a_ks]));
        for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], ai, bv[j]);
      }
    }
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < NV; ++j)
        _mm512_storeu_ps(C + (r + i) * ldc + x0 + 16 * j,
                         ACC ? acc[i][j] : _mm512_mul_ps(acc[i][j], _mm512_set1_ps(mul)));
  }
}

// C[64 rows, N] (N a multiple of 16), see dot_block.
template <bool ACC>
inline void dot_tile(float* __restrict C, int64_t ldc, const uint32_t* __restrict A, int64_t a_rs,
                     int64_t a_ks, const uint32_t* __restrict B, int64_t ldb, int64_t KP, int64_t N,
                     float mul = 1.0f) {
  for (int64_t x0 = 0; x0 < N; x0 += 64) {
    switch (std::min<int64_t>(4, (N - x0) / 16)) {
      case 4:
        dot_block<4, ACC>(C, ldc, A, a_rs, a_ks, B, ldb, KP, x0, mul);
        break;
      case 3:
        dot_block<3, ACC>(C, ldc, A, a_rs, a_ks, B, ldb, KP, x0, mul);
        break;
      case 2:
        dot_block<2, ACC>(C, ldc, A, a_rs, a_ks, B, ldb, KP, x0, mul);
        break;
      default:
        dot_block<1, ACC>(C, ldc, A, a_rs, a_ks, B, ldb, KP, x0, mul);
        break;
    }
  }
}

inline uint32_t bf16_pair(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

// Element x of row t of a head (rows src + t * stride, T_ x HS), 0 outside.
inline uint16_t head_bits(const bf16* src, int64_t t, int64_t x, int64_t T_, int64_t HS,
                          int64_t stride) {
  return t < T_ && x < HS ? src[t * stride + x].bits : uint16_t{0};
}

// dst[Tp][HSp/2] words = the head's rows as they come (A of the scores).
inline void pack_rows(uint32_t* dst, const bf16* src, int64_t T_, int64_t HS, int64_t stride,
                      int64_t Tp, int64_t HSp) {
  for (int64_t t = 0; t < Tp; ++t) {
    auto* d = reinterpret_cast<char*>(dst + t * (HSp / 2));
    const int64_t valid = t < T_ ? HS : 0;
    if (valid) std::memcpy(d, src + t * stride, static_cast<size_t>(valid) * sizeof(bf16));
    std::memset(d + valid * 2, 0, static_cast<size_t>(HSp - valid) * 2);
  }
}

// dst[HSp/2][Tp] words: word (p, t) = (x[t, 2p], x[t, 2p + 1]) (B of the scores).
// Note [Vector packing]: with HS a multiple of 16 (every word of a row inside the head) the
// words are transposed 16 x 16 at a time (transpose_panel, attention_tiles.h), and pair rows
// widen 16 elements of each row of the pair; element by element, the panels' strided writes and
// bounds tests took a quarter of the backward (perf).
inline void pack_words_t(uint32_t* dst, const bf16* src, int64_t T_, int64_t HS, int64_t stride,
                         int64_t Tp, int64_t HSp) {
  const int64_t HW = HSp / 2;
  if (HS != HSp) {
    for (int64_t t = 0; t < Tp; ++t)
      for (int64_t p = 0; p < HW; ++p)
        dst[p * Tp + t] = bf16_pair(head_bits(src, t, 2 * p, T_, HS, stride),
                                    head_bits(src, t, 2 * p + 1, T_, HS, stride));
    return;
  }
  transpose_panel(dst, reinterpret_cast<const uint32_t*>(src), T_, stride / 2, HW, Tp);
}

// dst[Tp/2][HSp] words: word (p, x) = (x[2p, x], x[2p + 1, x]) (B of the accumulations).
inline void pack_pair_rows(uint32_t* dst, const bf16* src, int64_t T_, int64_t HS, int64_t stride,
                           int64_t Tp, int64_t HSp) {
  if (HS != HSp) {
    for (int64_t p = 0; p < Tp / 2; ++p)
      for (int64_t x = 0; x < HSp; ++x)
        dst[p * HSp + x] = bf16_pair(head_bits(src, 2 * p, x, T_, HS, stride),
                                     head_bits(src, 2 * p + 1, x, T_, HS, stride));
    return;
  }
  // Note [Vector packing]
  const auto row16 = [&](int64_t t, int64_t x) {
    return t < T_ ? _mm512_maskz_cvtepu16_epi32(
                        0xffff,
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + t * stride + x)))
                  : _mm512_setzero_si512();
  };
  for (int64_t p = 0; p < Tp / 2; ++p)
    for (int64_t x = 0; x < HSp; x += 16)
      _mm512_storeu_si512(dst + p * HSp + x,
                          _mm512_or_si512(row16(2 * p, x), _mm512_maskz_slli_epi32(
                                                               0xffff, row16(2 * p + 1, x), 16)));
}

// dst[64][32] words = the f32 tile P[64,64] rounded to bf16 rows.
inline void tile_round(uint32_t* __restrict dst, const float* __restrict P) {
  for (int64_t i = 0; i < kTile * kTile; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst) + i / 16,
                        (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(P + i)));
}

// dst[32][64] words: word (p, c) = (P[2p, c], P[2p + 1, c]) rounded to bf16. (maskz forms: GCC 12
// warns maybe-uninitialized inside the unmasked ones, see cpu/convert.cpp.)
inline void tile_round_t(uint32_t* __restrict dst, const float* __restrict P) {
  for (int64_t p = 0; p < kTile / 2; ++p)
    for (int64_t c = 0; c < kTile; c += 16) {
      const __m512i lo = _mm512_maskz_cvtepu16_epi32(
          0xffff, (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(P + 2 * p * kTile + c)));
      const __m512i hi = _mm512_maskz_cvtepu16_epi32(
          0xffff, (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(P + (2 * p + 1) * kTile + c)));
      _mm512_storeu_si512(dst + p * kTile + c,
                          _mm512_or_si512(lo, _mm512_maskz_slli_epi32(0xffff, hi, 16)));
    }
}

}  // namespace braid::kernels::cpu

#endif  // __AVX512BF16__
