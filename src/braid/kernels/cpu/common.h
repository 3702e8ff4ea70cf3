// Helpers shared by the CPU kernels (internal to kernels/): dtype dispatch, f32/bf16/f16
// element access, argument checks that name the op, the argument and the numbers, and scratch
// buffers charged to the calling rank's tracker (Note [Kernel scratch]).
#pragma once

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "braid/core/tensor.h"
#include "braid/kernels/checks.h"

namespace braid::kernels::cpu {

// ---- element access (bf16 and f16 are computed in f32, stored rounded to nearest even; f16
// overflow stores inf) ----
inline float ld(const float* p) {
  return *p;
}
inline float ld(const bf16* p) {
  return bf16_bits_to_f32(p->bits);
}
inline void st(float* p, float v) {
  *p = v;
}
inline void st(bf16* p, float v) {
  p->bits = f32_to_bf16_bits(v);
}
// Note [f16 element access]: core/dtype.h converts f16 through _Float16, which GCC turns
// into one scalar vcvtph2ps / vcvtps2ph per element and never vectorises. These are the same
// conversions in branch-free integer arithmetic that loops vectorise like bf16's; checked bit
// for bit against the hardware for every f16 and every one of the 2^32 f32 inputs (and in
// cast_test.cpp against core/dtype.h on every f16 and the f32 edge cases). Round to nearest
// even; NaNs keep their top payload bits and come out quiet, as vcvtps2ph / vcvtph2ps do.
inline float ld(const f16* p) {
  const uint32_t em = p->bits & 0x7fffu, sign = static_cast<uint32_t>(p->bits & 0x8000u) << 16;
  const uint32_t normal = (em << 13) + 0x38000000u;  // rebias the exponent by 127 - 15
  // f16 denormals are em * 2^-24: exact through an int conversion (no f32 denormal, so DAZ
  // and FTZ cannot touch it)
  const uint32_t denormal =
      std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(em)) * 0x1p-24f);
  const uint32_t special = (em << 13) | 0x7f800000u | (em > 0x7c00u ? 0x00400000u : 0u);
  // masks, not nested selects: GCC vectorises this form
  const uint32_t is_denormal = 0u - static_cast<uint32_t>(em < 0x400u);
  const uint32_t is_special = 0u - static_cast<uint32_t>(em >= 0x7c00u);
  const uint32_t u =
      (denormal & is_denormal) | (special & is_special) | (normal & ~(is_denormal | is_special));
  return std::bit_cast<float>(u | sign);
}
inline void st(f16* p, float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  const uint32_t x = u & 0x7fffffffu, sign = (u >> 16) & 0x8000u;
  const uint32_t nan = ((x >> 13) & 0x3ffu) | 0x7e00u;
  // rebias by 15 - 127 and round the 13 dropped bits to nearest even
  const uint32_t normal = (x + 0xc8000fffu + ((x >> 13) & 1u)) >> 13;
  // below 2^-14 the f16 is denormal: adding 0.5 (ulp 2^-24) rounds |v| to a multiple of 2^-24
  const uint32_t denormal = std::bit_cast<uint32_t>(std::bit_cast<float>(x) + 0.5f) - 0x3f000000u;
  // x >= 65520 (0x477ff000, the tie above 65504) rounds to inf
  const uint32_t r = x > 0x7f800000u    ? nan
                     : x >= 0x477ff000u ? 0x7c00u
                     : x < 0x38800000u  ? denormal
                                        : normal;
  p->bits = static_cast<uint16_t>(r | sign);
}

// Row conversions, vectorised (Note [Vector conversions], cpu/convert.cpp) and bit-identical
// to ld/st element by element.
void load_row(float* dst, const float* src, int64_t n);
void load_row(float* dst, const bf16* src, int64_t n);
void load_row(float* dst, const f16* src, int64_t n);
void store_row(float* dst, const float* src, int64_t n);
void store_row(bf16* dst, const float* src, int64_t n);
void store_row(f16* dst, const float* src, int64_t n);
// dst += src (dst in its own dtype, src f32)
void add_row(float* dst, const float* src, int64_t n);
void add_row(bf16* dst, const float* src, int64_t n);
void add_row(f16* dst, const float* src, int64_t n);
// dst = src + beta * dst (beta == 0: dst = src, whatever dst held), rounded once to dst's
// dtype; n elements in parallel blocks. The write-back of a GEMM's f32 result.
void write_back(float* dst, const float* src, int64_t n, float beta);
void write_back(bf16* dst, const float* src, int64_t n, float beta);
void write_back(f16* dst, const float* src, int64_t n, float beta);

// ---- blocked element-wise loops ----
// Note [Blocked loops]: a loop that converts bf16/f16 element by element through ld/st spends
// more on the conversions than on its arithmetic (~10 vector instructions per 16 elements
// to round to bf16, ~30 each way for f16, against one vcvtps2ph/vcvtneps2bf16). Hot loops
// instead take blocks of at most kBlock elements: f32_in / f32_copy / f32_inout give a block
// as f32 (f16 converted into a stack buffer by the row helpers; bf16 inputs read in place,
// as widening is one shift), the loop runs on plain floats, and commit rounds the results
// back with store_row, each element once, as st would. For T = float they hand out the
// tensor's own memory and copy nothing, so f32 runs the very loop it always ran (the same
// roundings: bit-identical). 256 elements keep a kernel's few buffers in L1: 4096 spilled it
// and ran 1.5x slower; 128 to 1024 measured alike (bench/kernels_bench all).
constexpr int64_t kBlock = 256;

// bf16 read in place: widening is a 16-bit shift, as cheap in the loop's registers as from a
// buffer, so bf16 blocks skip the buffer on the way in (they still leave through one: the
// rounding is cheaper in store_row).
struct Bf16Row {
  const bf16* p;
  float operator[](int64_t i) const { return ld(&p[i]); }
  Bf16Row operator+(int64_t k) const { return {p + k}; }
};
// src[0:n) readable as f32 by [i] (and + k): src itself for float, a Bf16Row for bf16, else
// buf (n floats) filled from src.
template <typename T>
inline auto f32_in(const T* src, int64_t n, float* buf) {
  if constexpr (std::is_same_v<T, float>) {
    return src;
  } else if constexpr (std::is_same_v<T, bf16>) {
    return Bf16Row{src};
  } else {
    load_row(buf, src, n);
    return static_cast<const float*>(buf);
  }
}
// src[0:n) as f32 in memory: src itself for float, else buf (n floats) filled from it; for
// rows read more than once, where widening bf16 once beats widening it at every read.
template <typename T>
inline const float* f32_copy(const T* src, int64_t n, float* buf) {
  if constexpr (std::is_same_v<T, float>) {
    return src;
  } else {
    load_row(buf, src, n);
    return buf;
  }
}
// A writable f32 block for dst[0:n), written back by commit: dst itself for float, else buf
// (filled from dst by f32_inout, for loops that accumulate).
template <typename T>
inline float* f32_out(T* dst, float* buf) {
  if constexpr (std::is_same_v<T, float>) {
    return dst;
  } else {
    return buf;
  }
}
template <typename T>
inline float* f32_inout(T* dst, int64_t n, float* buf) {
  if constexpr (std::is_same_v<T, float>) {
    return dst;
  } else {
    load_row(buf, dst, n);
    return buf;
  }
}
template <typename T>
inline void commit(T* dst, const float* block, int64_t n) {
  if constexpr (!std::is_same_v<T, float>) store_row(dst, block, n);
}

// Calls fn(T{}) with T = float, bf16 or f16 according to dtype; other dtypes throw naming op.
template <typename Fn>
decltype(auto) dispatch_float(DType dtype, const char* op, Fn&& fn) {
  if (dtype == DType::f32) return fn(float{});
  if (dtype == DType::bf16) return fn(bf16{});
  if (dtype == DType::f16) return fn(f16{});
  BRAID_THROW(op, ": unsupported dtype ", dtype_name(dtype), " (expected f32, bf16 or f16)");
}

// ---- checks (and those of checks.h) ----
// Every tensor must live on the CPU; a tensor elsewhere throws "<backend> does not support
// <op>" through the device seam (no_cuda.cpp).
void check_cpu(const char* op, std::initializer_list<const Tensor*> tensors);
// grad[i] += sums[i] for i < n, added in f32 and rounded once to grad's dtype (any float).
void add_sums(Tensor& grad, const double* sums, int64_t n);

// ---- scratch ----
// Note [Kernel scratch]
// Scratch belongs to the thread that calls a kernel (a rank's thread), never to OpenMP
// workers: every slot is one growable, 64-byte aligned buffer in a thread_local arena of the
// calling thread. A parallel region that needs a buffer per team thread reserves them all on
// the calling thread before the region (TeamScratch: one buffer cut into equal parts) and each
// team thread takes its part by omp_get_thread_num(). So:
//  - the buffers are charged to the calling thread's MemoryScope tracker, category scratch:
//    the rank's tracker, also when ranks run as threads (workers, which have no MemoryScope,
//    never allocate); with no tracker nothing is charged;
//  - growth, and so a budget's OutOfMemory, happens outside parallel regions, where the
//    exception propagates (one thrown inside a region would terminate the process);
//  - the steady state takes no lock and allocates nothing: the tracker is called only when a
//    buffer grows, or when the thread's tracker changed since the buffer was charged (its
//    charge then moves to the new tracker);
//  - the buffers are freed and released from the tracker when the thread exits.
// Slots are independent so a kernel can hold a few buffers at once; slots 6 to 9 belong to
// the GEMM seam (6, 7: oneDNN's scratchpad, OpenBLAS's bf16 widening; 8, 9: the f16 widening
// of cpu/gemm_f16.cpp). Contents are undefined on return. Call these on the calling thread, outside
// the kernel's parallel regions.
void* scratch_raw(int slot, size_t bytes);
// The size a slot of `have` bytes has after a request of `bytes`: unchanged when it fits,
// else at least 1.5x (growing by steps would reallocate at every larger shape), 64-byte
// rounded. kernels/scratch_plan.h replays requests through it.
inline size_t scratch_grown(size_t have, size_t bytes) {
  if (have >= bytes) return have;
  return (std::max(bytes, have + have / 2) + 63) / 64 * 64;
}
// The LM head's row chunks (cpu/cross_entropy.cpp), and how many rows of bf16 dlogits its
// weight gradient takes in one GEMM (Note [Grouped weight gradient]); kernels/scratch_plan.h
// replays both.
constexpr int64_t kLmHeadChunk = 256;
inline int64_t lm_head_dw_group_rows(int64_t V) {
  const int64_t by_bytes = (int64_t{32} << 20) / (2 * std::max<int64_t>(V, 1));
  return std::clamp<int64_t>(by_bytes / kLmHeadChunk * kLmHeadChunk, kLmHeadChunk,
                             4 * kLmHeadChunk);
}
// The rows the weight-gradient GEMM takes after the chunk [r0, r0 + R) of N rows, in groups of
// `group` rows: the group's rows when the chunk ends it (or ends the rows), else 0.
inline int64_t lm_head_group_done(int64_t r0, int64_t R, int64_t N, int64_t group) {
  const int64_t filled = r0 + R - r0 / group * group;
  return r0 + R == N || filled == group ? filled : 0;
}
inline float* scratch(int slot, int64_t n) {
  return static_cast<float*>(scratch_raw(slot, static_cast<size_t>(n) * sizeof(float)));
}
template <typename T>
inline T* scratch_as(int slot, int64_t n) {
  return static_cast<T*>(scratch_raw(slot, static_cast<size_t>(n) * sizeof(T)));
}
double* scratch_f64(int slot, int64_t n);  // slots 0..3, separate from scratch_raw's

// grad[C] += the column sums of rows[N, C] (a bias gradient), summed in f64 in row order with
// each thread owning a contiguous range of columns (independent of the thread count), then
// added by add_sums. Uses scratch_f64 slot 0.
template <typename T>
void add_column_sums(Tensor& grad, const T* rows, int64_t N, int64_t C) {
  double* acc = scratch_f64(0, C);
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t per = (C + nt - 1) / nt, c0 = std::min<int64_t>(C, id * per);
    const int64_t c1 = std::min<int64_t>(C, c0 + per);
    for (int64_t c = c0; c < c1; ++c) acc[c] = 0.0;
    for (int64_t n = 0; n < N; ++n) {
      const T* row = rows + n * C;
      for (int64_t c = c0; c < c1; ++c) acc[c] += ld(&row[c]);
    }
  }
  add_sums(grad, acc, C);
}

// Number of OpenMP threads a parallel region in a kernel should use.
inline int num_threads() {
  return omp_get_max_threads();
}

// n elements of T for each thread of the next parallel region, reserved in scratch slot
// `slot` on the calling thread (Note [Kernel scratch]); inside the region mine() is this
// thread's part. threads: the region's team size or more (a region without a num_threads
// clause has at most num_threads()).
template <typename T>
class TeamScratch {
 public:
  TeamScratch(int slot, int64_t n, int threads = num_threads())
      : stride_((static_cast<int64_t>(sizeof(T)) * n + 63) / 64 * 64 /
                static_cast<int64_t>(sizeof(T))),
        base_(static_cast<T*>(scratch_raw(
            slot, static_cast<size_t>(stride_) * sizeof(T) * static_cast<size_t>(threads)))) {
    static_assert(64 % sizeof(T) == 0);
  }
  T* mine() const { return base_ + stride_ * omp_get_thread_num(); }

 private:
  int64_t stride_;  // n rounded up to 64 bytes: no two threads share a cache line
  T* base_;
};

// exp(x) for f32 in a branch-free, vectorisable form (Cephes polynomial, ~2 ulp on
// [-87, 88]; below that it returns 0, above it saturates near FLT_MAX's exponent).
inline float fast_exp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  // round to nearest through the 1.5 * 2^23 shifter (vectorises, unlike roundevenf)
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t e = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  __builtin_memcpy(&scale, &e, 4);
  return x <= -87.0f ? 0.0f : p * scale;
}
// tanh through exp: 1 - 2 / (exp(2x) + 1), vectorisable.
inline float fast_tanh(float x) {
  return 1.0f - 2.0f / (fast_exp(2.0f * x) + 1.0f);
}

}  // namespace braid::kernels::cpu
