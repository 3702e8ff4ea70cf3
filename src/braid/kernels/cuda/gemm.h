// GEMM on the device through cuBLASLt (gemm.cu), for the kernels that need one beyond
// matmul/linear (the LM head's chunked cross-entropy, attention's fallbacks).
#pragma once

#include <cstdint>

#include "braid/core/dtype.h"

namespace braid::kernels::cuda {

// What cuBLASLt fuses after the product.
enum class Epilogue {
  none,
  bias,       // c += bias[n] broadcast over rows (bias has the dtype of a and b)
  bias_grad,  // also bias[i] = sum over k of op(a)[i, k], written (not accumulated) in c's
              // dtype: the bias gradient taken in the weight-gradient GEMM's pass over dout
};

struct GemmArgs {
  DType ab = DType::f32;  // dtype of a and b: f32 (TF32 tensor cores unless disabled), bf16, f16
  DType c = DType::f32;   // dtype of c: ab's, or f32 (accumulate low-precision products in f32)
  const void* a = nullptr;
  const void* b = nullptr;
  void* c_ptr = nullptr;
  int64_t m = 0, n = 0, k = 0;  // c is [m, n]; op(a) [m, k]; op(b) [k, n]
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0;  // row strides (elements) of a, b, c as stored (row-major)
  float alpha = 1.0f, beta = 0.0f;
  Epilogue epilogue = Epilogue::none;
  const void* bias = nullptr;  // Epilogue::bias: [n], read
  void* dbias = nullptr;       // Epilogue::bias_grad: [m], written
};

// c[m,n] = alpha * op(a) @ op(b) + beta * c, all row-major device memory, queued on the current
// stream. ld* of 0 mean "packed" (the row length of the stored matrix).
void gemm(const GemmArgs& args);

// gemm(args) where cuBLASLt has an algorithm for it; false (and nothing queued) where it has
// none, as it may lack one for an epilogue at some layouts and dtypes: the caller falls back.
bool try_gemm(const GemmArgs& args);

// Whether f32 GEMMs may use TF32 tensor cores: off by default (f32 stays f32, as PyTorch's
// torch.backends.cuda.matmul.allow_tf32 = False); BRAID_CUDA_TF32=1 turns it on.
bool tf32_enabled();

}  // namespace braid::kernels::cuda
