// What the CUDA attention files share (Note [CUDA flash attention], attention.cu): the call's
// dimensions, constants, and the entry points of the two paths, attention_generic.cu (SIMT,
// any float dtype, 1 <= HS <= 256) and attention_mma.cu (tensor cores, bf16/f16, HS 64 or 128).
// Pointers are [B,T,heads,HS] rows as attention.cu describes; lse [B,NH,Tq] f32; D [B,NH,Tq] f32
// (sum_d dout * out, for the backward).
#pragma once

#include <cstddef>
#include <cstdint>

#include "braid/kernels/cuda/common.cuh"

namespace braid::kernels::cuda::attention_impl {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kThreads = 128;

struct Dims {
  int B, Tq, Tk, NH, NKV, HS, group;
  bool causal;
};

// Lets kernel take more than 48 KiB of dynamic shared memory where it asks for that much.
template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    BRAID_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(bytes)),
                     "attention: cudaFuncSetAttribute");
}

// Offsets of row t of head h (of n heads) in batch b of a [B,T,n,HS] tensor.
__device__ __forceinline__ int64_t row_off(int b, int t, int T, int h, int n, int HS) {
  return ((static_cast<int64_t>(b) * T + t) * n + h) * HS;
}

// attention_generic.cu; T = float, bf16_t or f16_t.
template <typename T>
void generic_forward(T* out, float* lse, const T* q, const T* k, const T* v, const Dims& d,
                     float scale);
template <typename T>
void generic_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                      const float* lse, const float* D, const Dims& d, float scale);

// attention_mma.cu; T = bf16_t or f16_t, d.HS 64 or 128, every pointer 16-byte aligned.
template <typename T>
void mma_forward(T* out, float* lse, const T* q, const T* k, const T* v, const Dims& d,
                 float scale);
template <typename T>
void mma_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                  const float* lse, const float* D, const Dims& d, float scale);

}  // namespace braid::kernels::cuda::attention_impl
