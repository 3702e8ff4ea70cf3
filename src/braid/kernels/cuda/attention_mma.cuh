// The tensor-core path of CUDA attention (Note [CUDA flash attention], attention.cu), the
// pieces its forward (attention_mma_forward.cu) and backward (attention_mma_backward.cu)
// kernels share: FlashAttention-2 on mma.sync m16n8k16, bf16/f16 inputs, f32 accumulators.
#pragma once

#include <cstdint>

#include "braid/kernels/cuda/attention.cuh"

namespace braid::kernels::cuda::attention_impl::mma {

// ---------------------------------------------------------------------------------------------
// Fast path: tensor cores (mma.sync m16n8k16, bf16/f16 inputs, f32 accumulators).
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"), g = lane / 4, c = lane % 4:
//   A 16x16 row-major: a[0] = A[g][2c..2c+1], a[1] = A[g+8][2c..], a[2] = A[g][2c+8..],
//                      a[3] = A[g+8][2c+8..] (two 16-bit values per register, low = lower col)
//   B 16x8 (k x n):    b[0] = B[2c..2c+1][g], b[1] = B[2c+8..2c+9][g] (low = lower k)
//   C 16x8 f32:        c[0..1] = C[g][2c..2c+1], c[2..3] = C[g+8][2c..2c+1]
// So the accumulators of two adjacent 8-column blocks of C are, once packed, the A fragment
// of the 16 columns they cover (the FlashAttention-2 register reuse of P and dS).

constexpr int kFB = 64;  // query rows and keys per tile (16 per warp)

template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  if constexpr (std::is_same_v<T, bf16_t>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats rounded to T, lo in the low half.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same_v<T, bf16_t>) {
    __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
    std::memcpy(&r, &p, 4);
  } else {
    __half2 p = __floats2half2_rn(lo, hi);
    std::memcpy(&r, &p, 4);
  }
  return r;
}
// dst[kFB][HS+8] = rows [t0, t0+kFB) of head h of src (zero past T), 16 bytes at a time by
// cp.async (zero-filled past T: a source size of 0 reads nothing); part of the calling
// thread's next cp.async group.
template <typename T, int HS>
__device__ __forceinline__ void load_tile_async(T* dst, const T* src, int b, int t0, int T_, int h,
                                                int n) {
  constexpr int kLd = HS + 8, kPer = HS / 8;
  for (int e = threadIdx.x; e < kFB * kPer; e += kThreads) {
    const int r = e / kPer, x = (e % kPer) * 8, t = t0 + r;
    const T* from = t < T_ ? src + row_off(b, t, T_, h, n, HS) + x : src;
    const auto to = static_cast<uint32_t>(__cvta_generic_to_shared(dst + r * kLd + x));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(from),
                 "r"(t < T_ ? 16 : 0)
                 : "memory");
  }
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most n of this thread's cp.async groups are pending.
template <int n>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(n) : "memory");
}

// Four 8x8 matrices of 16-bit values from shared memory (ldmatrix): lanes 8i..8i+7 give the
// row addresses of matrix i, and r[i] gets this lane's fragment of it: row lane/4, columns
// 2(lane%4) and 2(lane%4)+1 (trans: column lane/4, rows 2(lane%4) and 2(lane%4)+1).
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a)
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void* p) {
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a)
               : "memory");
}

// acc[8][4] += X_w Y^T where X_w is 16 rows of X (rows start at x) and Y the kFB rows at y,
// both [*, HS+8] in shared memory: a 16 x 64 tile of dot products over HS.
// A fragment (ldmatrix matrices: rows 0-7 / 8-15 x columns k0 / k0+8): lane l points at row
// l%16, column k0 + (l/16)*8. B fragments of n-blocks 2p and 2p+1 (matrices: Y rows 16p..+7
// at k0, at k0+8, rows 16p+8..+15 at k0, at k0+8): lane l points at Y row 16p + l%8 +
// (l/16)*8, column k0 + ((l/8)%2)*8. Rows are 16-byte aligned (HS+8 halves = 16k bytes) and
// 4 words apart in banks, so the 8 rows of a matrix hit 32 distinct banks.
template <typename T, int HS>
__device__ __forceinline__ void tile_dots(float (&acc)[8][4], const T* x, const T* y) {
  constexpr int kLd = HS + 8;
  const int lane = threadIdx.x % 32;
  const T* xa = x + (lane % 16) * kLd + (lane / 16) * 8;
  const T* yb = y + (lane % 8 + (lane / 16) * 8) * kLd + ((lane / 8) % 2) * 8;
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk) {
    uint32_t a[4];
    ldsm_x4(a, xa + kk * 16);
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t bb[4];
      ldsm_x4(bb, yb + np * 16 * kLd + kk * 16);
      mma16816<T>(acc[2 * np], a, bb[0], bb[1]);
      mma16816<T>(acc[2 * np + 1], a, bb[2], bb[3]);
    }
  }
}

// acc[HS/8][4] += P Y where P (16 x 64) is in C-fragment registers p[8][4] and Y is [kFB][HS+8]
// in shared memory (rows are the k dimension). B fragments of n-blocks 2p and 2p+1 by
// ldmatrix.trans (matrices: Y rows k0..+7 at column 16p, rows k0+8..+15 at 16p, rows k0..+7
// at 16p+8, rows k0+8..+15 at 16p+8): lane l points at row k0 + l%16, column 16p + (l/16)*8.
template <typename T, int HS>
__device__ __forceinline__ void tile_mul(float (&acc)[HS / 8][4], const float (&p)[8][4],
                                         const T* y) {
  constexpr int kLd = HS + 8;
  const int lane = threadIdx.x % 32;
  const T* yb = y + (lane % 16) * kLd + (lane / 16) * 8;
#pragma unroll
  for (int kk = 0; kk < kFB / 16; ++kk) {
    uint32_t a[4];
    a[0] = pack2<T>(p[2 * kk][0], p[2 * kk][1]);
    a[1] = pack2<T>(p[2 * kk][2], p[2 * kk][3]);
    a[2] = pack2<T>(p[2 * kk + 1][0], p[2 * kk + 1][1]);
    a[3] = pack2<T>(p[2 * kk + 1][2], p[2 * kk + 1][3]);
#pragma unroll
    for (int np = 0; np < HS / 16; ++np) {
      uint32_t bb[4];
      ldsm_x4_trans(bb, yb + kk * 16 * kLd + np * 16);
      mma16816<T>(acc[2 * np], a, bb[0], bb[1]);
      mma16816<T>(acc[2 * np + 1], a, bb[2], bb[3]);
    }
  }
}

}  // namespace braid::kernels::cuda::attention_impl::mma
