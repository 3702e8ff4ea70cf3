// Tile kernels of the flash attention (internal to cpu/attention.cpp). Score tiles are
// [kBq, kBk] f32 with row stride kBk; panels are f32 [rows, HS] or transposed [HS, T].
// diag = i0 - j0 (query block start minus key block start): key c of a tile is visible to
// query row r iff c <= r + diag (causal mask).
#pragma once

#include <cmath>
#include <cstdint>

#include "braid/kernels/cpu/common.h"

namespace braid::kernels::cpu {

constexpr int64_t kBq = 64;  // query rows per tile
constexpr int64_t kBk = 64;  // key columns per tile

// S[r, c] = sum_d A[r, d] * Bt[d, c]   (r < m, c < n, d < k; A row stride lda, Bt ldb)
inline void tile_scores(float* __restrict S, const float* __restrict A, int64_t lda,
                        const float* __restrict Bt, int64_t ldb, int64_t m, int64_t n, int64_t k) {
  for (int64_t r = 0; r < m; ++r) {
    float* s = S + r * kBk;
    for (int64_t c = 0; c < n; ++c) s[c] = 0.0f;
    for (int64_t d = 0; d < k; ++d) {
      const float a = A[r * lda + d];
      const float* b = Bt + d * ldb;
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) s[c] += a * b[c];
    }
  }
}

// Number of visible keys of row r in a tile of n keys.
inline int64_t visible(int64_t r, int64_t n, int64_t diag) {
  int64_t v = r + diag + 1;
  return v < 0 ? 0 : (v > n ? n : v);
}

// One online-softmax step of the forward: S (scores, already scaled) of m x n against
// V[n, HS]; updates running max mx, sum l and unnormalised output O[m, HS].
inline void online_softmax_update(float* __restrict S, float* __restrict O, float* mx, float* l,
                                  const float* __restrict V, int64_t m, int64_t n, int64_t HS,
                                  int64_t diag) {
  for (int64_t r = 0; r < m; ++r) {
    const int64_t nv = visible(r, n, diag);
    if (nv == 0) continue;
    float* s = S + r * kBk;
    float row_max = mx[r];
    for (int64_t c = 0; c < nv; ++c) row_max = s[c] > row_max ? s[c] : row_max;
    const float alpha = fast_exp(mx[r] - row_max);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < nv; ++c) {
      s[c] = fast_exp(s[c] - row_max);
      sum += s[c];
    }
    mx[r] = row_max;
    l[r] = l[r] * alpha + sum;
    float* o = O + r * HS;
    for (int64_t x = 0; x < HS; ++x) o[x] *= alpha;
    for (int64_t c = 0; c < nv; ++c) {
      const float p = s[c];
      const float* vr = V + c * HS;
#pragma omp simd
      for (int64_t x = 0; x < HS; ++x) o[x] += p * vr[x];
    }
  }
}

// P = exp(S * scale - lse[r]) where visible, 0 elsewhere (in place).
inline void tile_probs(float* __restrict P, const float* lse, float scale, int64_t m, int64_t n,
                       int64_t diag) {
  for (int64_t r = 0; r < m; ++r) {
    const int64_t nv = visible(r, n, diag);
    float* p = P + r * kBk;
    const float l = lse[r];
#pragma omp simd
    for (int64_t c = 0; c < nv; ++c) p[c] = fast_exp(p[c] * scale - l);
    for (int64_t c = nv; c < n; ++c) p[c] = 0.0f;
  }
}

// dS = P * (dP - D[r]) * scale (dP given in dS, in place).
inline void tile_dscores(float* __restrict dS, const float* __restrict P, const float* D,
                         float scale, int64_t m, int64_t n) {
  for (int64_t r = 0; r < m; ++r) {
    float* ds = dS + r * kBk;
    const float* p = P + r * kBk;
    const float dr = D[r];
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) ds[c] = p[c] * (ds[c] - dr) * scale;
  }
}

// C[r, :] += sum_c A[r, c] * B[c, :]    (A a score tile m x n, B [n, HS], C [m, HS])
inline void tile_acc_nn(float* __restrict C, const float* __restrict A, const float* __restrict B,
                        int64_t m, int64_t n, int64_t HS) {
  for (int64_t r = 0; r < m; ++r) {
    float* cr = C + r * HS;
    for (int64_t c = 0; c < n; ++c) {
      const float a = A[r * kBk + c];
      if (a == 0.0f) continue;
      const float* br = B + c * HS;
#pragma omp simd
      for (int64_t x = 0; x < HS; ++x) cr[x] += a * br[x];
    }
  }
}

// C[c, :] += sum_r A[r, c] * B[r, :]    (A a score tile m x n, B [m, HS], C [n, HS])
inline void tile_acc_tn(float* __restrict C, const float* __restrict A, const float* __restrict B,
                        int64_t m, int64_t n, int64_t HS) {
  for (int64_t r = 0; r < m; ++r) {
    const float* br = B + r * HS;
    for (int64_t c = 0; c < n; ++c) {
      const float a = A[r * kBk + c];
      if (a == 0.0f) continue;
      float* cr = C + c * HS;
#pragma omp simd
      for (int64_t x = 0; x < HS; ++x) cr[x] += a * br[x];
    }
  }
}

}  // namespace braid::kernels::cpu
