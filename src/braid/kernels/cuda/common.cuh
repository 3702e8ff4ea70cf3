// Device-side helpers shared by the CUDA kernels (.cu files only), written the way llm.c's
// CUDA kernels are: f32 arithmetic on f32/bf16/f16 storage, 128-bit packed loads and stores,
// warp and block reductions.
//
// Rounding: stores to bf16 and f16 round to nearest even (__float2bfloat16_rn,
// __float2half_rn), as core/dtype.h does on the host; f16 beyond 65504 becomes inf.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "braid/core/dtype.h"
#include "braid/core/error.h"
#include "braid/kernels/cuda/runtime.h"

namespace braid::kernels::cuda {

using bf16_t = __nv_bfloat16;
using f16_t = __half;

// ---- element access in f32 ----
__device__ __forceinline__ float ld(const float* p) {
  return *p;
}
__device__ __forceinline__ float ld(const bf16_t* p) {
  return __bfloat162float(*p);
}
__device__ __forceinline__ float ld(const f16_t* p) {
  return __half2float(*p);
}
__device__ __forceinline__ float to_f32(float v) {
  return v;
}
__device__ __forceinline__ float to_f32(bf16_t v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float to_f32(f16_t v) {
  return __half2float(v);
}
template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ bf16_t from_f32<bf16_t>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ f16_t from_f32<f16_t>(float v) {
  return __float2half_rn(v);
}
template <typename T>
__device__ __forceinline__ void st(T* p, float v) {
  *p = from_f32<T>(v);
}

// ---- 128-bit packs (llm.c's x128): 4 floats or 8 bf16/f16 per load ----
template <typename T>
struct alignas(16) Pack128 {
  static constexpr int size = 16 / sizeof(T);
  T v[size];
  __device__ __forceinline__ float get(int i) const { return to_f32(v[i]); }
  __device__ __forceinline__ void set(int i, float x) { v[i] = from_f32<T>(x); }
};
template <typename T>
__device__ __forceinline__ Pack128<T> load128(const T* p) {
  return *reinterpret_cast<const Pack128<T>*>(p);
}
// Streaming load: read once, do not keep in cache (ld.global.cs).
template <typename T>
__device__ __forceinline__ Pack128<T> load128cs(const T* p) {
  Pack128<T> out;
  int4 raw = __ldcs(reinterpret_cast<const int4*>(p));
  *reinterpret_cast<int4*>(&out) = raw;
  return out;
}
template <typename T>
__device__ __forceinline__ void store128(T* p, const Pack128<T>& x) {
  *reinterpret_cast<Pack128<T>*>(p) = x;
}
// P consecutive elements as f32: P = 1 (scalar) or Pack128<T>::size (one 128-bit access).
template <typename T, int P>
__device__ __forceinline__ void load_vec(const T* p, float* out) {
  if constexpr (P == 1) {
    out[0] = ld(p);
  } else {
    const Pack128<T> pk = load128(p);
#pragma unroll
    for (int j = 0; j < P; ++j) out[j] = pk.get(j);
  }
}
template <typename T, int P>
__device__ __forceinline__ void store_vec(T* p, const float* in) {
  if constexpr (P == 1) {
    st(p, in[0]);
  } else {
    Pack128<T> pk;
#pragma unroll
    for (int j = 0; j < P; ++j) pk.set(j, in[j]);
    store128(p, pk);
  }
}

// ---- 8 elements as f32 (p 16-byte aligned: one or two 128-bit accesses) ----
template <typename T>
__device__ __forceinline__ void load8(const T* p, float* f) {
  if constexpr (sizeof(T) == 4) {
    const Pack128<float> a = load128(p), b = load128(p + 4);
#pragma unroll
    for (int i = 0; i < 4; ++i) f[i] = a.v[i], f[4 + i] = b.v[i];
  } else {
    const Pack128<T> a = load128(p);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = a.get(i);
  }
}
template <typename T>
__device__ __forceinline__ void store8(T* p, const float* f) {
  if constexpr (sizeof(T) == 4) {
    Pack128<float> a, b;
#pragma unroll
    for (int i = 0; i < 4; ++i) a.v[i] = f[i], b.v[i] = f[4 + i];
    store128(p, a);
    store128(p + 4, b);
  } else {
    Pack128<T> a;
#pragma unroll
    for (int i = 0; i < 8; ++i) a.set(i, f[i]);
    store128(p, a);
  }
}

// Whether every pointer is 16-byte aligned and n a multiple of the pack size, so a kernel may
// take its 128-bit path.
template <typename T>
inline bool packable(int64_t n, std::initializer_list<const void*> ptrs) {
  if (n % Pack128<T>::size != 0) return false;
  for (const void* p : ptrs) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

// ---- reductions ----
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the sum.
// `shared` holds 32 floats. Contains __syncthreads: call from every thread.
__device__ __forceinline__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : 0.0f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : -INFINITY;
  return warp_max(v);
}

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
// A 1-D grid covering n items with `block` threads each (capped; kernels loop grid-stride).
inline unsigned grid_for(int64_t n, int block, int64_t cap = 65535LL * 8) {
  int64_t g = ceil_div(n, block);
  if (g < 1) g = 1;
  return static_cast<unsigned>(g < cap ? g : cap);
}

// ---- dtype dispatch: fn(T{}) with T = float, bf16_t or f16_t ----
template <typename Fn>
decltype(auto) dispatch_float(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      return fn(float{});
    case DType::bf16:
      return fn(bf16_t{});
    case DType::f16:
      return fn(f16_t{});
    default:
      BRAID_THROW(op, ": dtype ", dtype_name(dtype), " is not a float dtype (f32, bf16, f16)");
  }
}

}  // namespace braid::kernels::cuda
