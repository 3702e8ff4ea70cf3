// GEMM through OpenBLAS's cblas_sgemm (f32). bf16 inputs are widened to f32 in per-thread
// scratch first (0.3.21's sbgemm is not built into every distribution package).
// Note [OpenBLAS threads]: Debian's libopenblas0-pthread keeps its own thread pool; set
// OPENBLAS_NUM_THREADS to cores / ranks, and OPENBLAS_CORETYPE=SkylakeX on Zen 5, which
// 0.3.21 does not recognise (it falls back to its AVX2 kernels at half speed).
#include <cblas.h>

#include "braid/kernels/cpu/common.h"
#include "braid/kernels/cpu/gemm.h"
#include "braid/kernels/ops.h"
#include "braid/kernels/scratch_plan.h"

namespace braid::kernels {

const char* gemm_backend_name() {
  return "openblas";
}

namespace cpu {

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
          const float* bias) {
  if (M == 0 || N == 0) return;
  if (bias || K == 0) {  // fold beta and the bias into C, then accumulate the product
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        C[i * ldc + j] = (beta == 0.0f ? 0.0f : beta * C[i * ldc + j]) + (bias ? bias[j] : 0.0f);
    beta = 1.0f;
    if (K == 0) return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(M), static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
              static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
              static_cast<blasint>(ldc));
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
          int64_t lda, const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc,
          const float* bias) {
  int64_t a_rows = ta ? K : M, a_cols = ta ? M : K;
  int64_t b_rows = tb ? N : K, b_cols = tb ? K : N;
  int64_t na = a_rows == 0 ? 0 : (a_rows - 1) * lda + a_cols;
  int64_t nb = b_rows == 0 ? 0 : (b_rows - 1) * ldb + b_cols;
  float* a = scratch(6, na);
  float* b = scratch(7, nb);
  load_row(a, A, na);
  load_row(b, B, nb);
  gemm(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, C, ldc, bias);
}

void plan_gemm(ScratchPlan& plan, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float, bool,
               DType dtype) {
  if (dtype != DType::bf16 || M == 0 || N == 0) return;
  (void)ta, (void)tb;
  plan.take(6, M * K * static_cast<int64_t>(sizeof(float)));  // both operands widened
  plan.take(7, K * N * static_cast<int64_t>(sizeof(float)));
}

}  // namespace cpu
}  // namespace braid::kernels
