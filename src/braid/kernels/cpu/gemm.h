// The GEMM seam of the CPU kernels (internal): one library (oneDNN or OpenBLAS, chosen by
// CMake: gemm_onednn.cpp or gemm_openblas.cpp) behind raw row-major pointer calls; f16 goes
// through the library's f32 GEMM (gemm_f16.cpp).
//
// C[M,N] (f32, row stride ldc) = alpha * op(A) @ op(B) + beta * C, where op(A) is [M,K]:
// A is stored [M,K] (lda >= K) or, when ta, [K,M] (lda >= M); likewise B is [K,N] or, when
// tb, [N,K]. beta == 0 overwrites C (NaNs in C are not propagated). bias (f32, [N], may be
// null) is added to every row after the product: C = alpha op(A) op(B) + beta C + bias.
#pragma once

#include <cstdint>

#include "braid/core/dtype.h"

namespace braid::kernels {
class ScratchPlan;
}

namespace braid::kernels::cpu {

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
          const float* bias = nullptr);
// bf16 inputs, f32 accumulation and output.
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
          int64_t lda, const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc,
          const float* bias = nullptr);
// f16 inputs, widened to f32 for the f32 GEMM (Note [f16 GEMM], cpu/gemm_f16.cpp).
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const f16* A, int64_t lda,
          const f16* B, int64_t ldb, float beta, float* C, int64_t ldc,
          const float* bias = nullptr);
// Widens the rows x cols matrix src (row stride ld) to f32 in scratch slot `slot`, packed
// (row stride cols), in parallel; returns it.
float* widen(int slot, const f16* src, int64_t rows, int64_t cols, int64_t ld);
// The scratch the f32 or bf16 gemm above takes for this shape (dense operands), made as
// requests on plan: the library's own (kernels/scratch_plan.h).
void plan_gemm(ScratchPlan& plan, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float beta,
               bool bias, DType dtype);

}  // namespace braid::kernels::cpu
