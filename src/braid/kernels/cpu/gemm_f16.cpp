// f16 GEMM for every GEMM library: both operands widened to f32, then the library's f32 GEMM.
//
// Note [f16 GEMM]: oneDNN 2.6 has no f16 matmul on CPUs without AVX512-FP16 (Zen 4 has none):
// creating the primitive fails ("could not create a primitive descriptor iterator"), and
// OpenBLAS has no f16 GEMM at all. Widening is exact (every f16 is an f32) and cheap next to
// the product: an M x N x K GEMM converts M K + K N elements for 2 M N K flops. On one Zen 4
// thread the qkv product 2048 x 1152 x 384 takes 17.0 ms in f32 and 17.1 ms in f16, of which
// widening is 0.08 ms (and rounding the f32 result to f16, the caller's, 0.2 ms); bf16 runs
// about 2x faster on AVX512-BF16 (bench/gemm_bench: braid, braid_f16, braid_bf16). The
// operands are packed (row stride = their column count) in scratch slots 8 and 9 (Note
// [Kernel scratch]); the f32 GEMM may use slots 6 and 7.
#include <algorithm>

#include "braid/kernels/cpu/common.h"
#include "braid/kernels/cpu/gemm.h"

namespace braid::kernels::cpu {

float* widen(int slot, const f16* src, int64_t rows, int64_t cols, int64_t ld) {
  float* dst = scratch(slot, rows * cols);
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 15))
  for (int64_t r = 0; r < rows; ++r) load_row(dst + r * cols, src + r * ld, cols);
  return dst;
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const f16* A, int64_t lda,
          const f16* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K;
  const int64_t b_rows = tb ? N : K, b_cols = tb ? K : N;
  const float* a = widen(8, A, a_rows, a_cols, lda);
  const float* b = widen(9, B, b_rows, b_cols, ldb);
  gemm(ta, tb, M, N, K, alpha, a, std::max<int64_t>(a_cols, 1), b, std::max<int64_t>(b_cols, 1),
       beta, C, ldc, bias);
}

}  // namespace braid::kernels::cpu
