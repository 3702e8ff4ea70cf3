// Ops over a list of tensors, one launch per kMaxSegments of them (Note [Multi-tensor
// launches], multi_tensor.cuh); the one-tensor versions are lists of one.
//   max_abs, sum_squares_fixed   per-block partials, finished by one more block on the device;
//                                one value copied back
//   scale                        x *= alpha, in place
// sum_squares_fixed is bit-identical to the CPU kernel (Note [Exact norm], cpu/exact_norm.cpp):
// the same per-element integer terms, summed exactly (integer sums do not depend on order).
#include <algorithm>
#include <cmath>
#include <vector>

#include "braid/kernels/cuda/multi_tensor.cuh"

namespace braid::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kReduceBlocks = 1024;  // per tensor
constexpr int64_t kMapBlocks = 4096;     // per tensor

// Block `blockIdx.x` of the launch: fn(p, i) over its share of its segment's elements.
template <typename Fn>
__device__ __forceinline__ void for_my_elements(const SegmentBatch& b, Fn&& fn) {
  const Segment& s = segment_of(b, static_cast<int>(blockIdx.x));
  const int64_t stride = segment_stride(s), first = segment_first(s);
  with_float_type(s.dtype, [&](auto tag) {
    auto* p = static_cast<decltype(tag)*>(s.data);
    for (int64_t i = first; i < s.n; i += stride) fn(p, i);
  });
}

__global__ void max_abs_kernel(float* partial, const __grid_constant__ SegmentBatch b) {
  __shared__ float shared[32];
  float m = 0.0f;
  for_my_elements(b, [&](auto* p, int64_t i) {
    const float a = fabsf(ld(p + i));
    m = fmaxf(m, a == a ? a : INFINITY);  // nan -> inf
  });
  m = block_max(m, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = m;
}

// Exact 128-bit unsigned sums as (lo, hi) 64-bit words: every term is >= 0.
struct U128 {
  unsigned long long lo, hi;
};
__device__ __forceinline__ void add_u128(U128& a, unsigned long long lo, unsigned long long hi) {
  a.lo += lo;
  a.hi += hi + (a.lo < lo ? 1ull : 0ull);
}
// shared[0] = the sum of every thread's acc (blockDim.x == kThreads, a power of two).
__device__ __forceinline__ void block_sum_u128(U128 acc, U128* shared) {
  shared[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) {
      const U128 o = shared[threadIdx.x + s];
      add_u128(shared[threadIdx.x], o.lo, o.hi);
    }
    __syncthreads();
  }
}

// Terms floor(x^2 2^shift) exactly as the CPU kernel forms them: the f32 value widened to f64,
// squared (exact), times 2^shift (exact), truncated to int64.
__global__ void sum_squares_fixed_kernel(U128* partial, const __grid_constant__ SegmentBatch b,
                                         double scale) {
  __shared__ U128 shared[kThreads];
  U128 acc{0, 0};
  for_my_elements(b, [&](auto* p, int64_t i) {
    const double e = ld(p + i);
    const int64_t term = static_cast<int64_t>(e * e * scale);
    add_u128(acc, static_cast<unsigned long long>(term), term < 0 ? ~0ull : 0ull);
  });
  block_sum_u128(acc, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = shared[0];
}

// The second stage, one block: partial[0] = the max / the sum of partial[0, n). Both are exact
// in any order, so the result is the host's sum of the partials.
__global__ void max_finish_kernel(float* partial, int64_t n) {
  __shared__ float shared[32];
  float m = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, partial[i]);
  m = block_max(m, shared);
  if (threadIdx.x == 0) partial[0] = m;
}
__global__ void sum_finish_kernel(U128* partial, int64_t n) {
  __shared__ U128 shared[kThreads];
  U128 acc{0, 0};
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) add_u128(acc, partial[i].lo, partial[i].hi);
  block_sum_u128(acc, shared);
  if (threadIdx.x == 0) partial[0] = shared[0];
}

__global__ void scale_kernel(const __grid_constant__ SegmentBatch b, float alpha) {
  for_my_elements(b, [&](auto* p, int64_t i) { st(p + i, alpha * ld(p + i)); });
}

// Runs launch(l, partials + l's first block) for each launch of xs, then finish(partials, n)
// on one block, and returns partials[0] (zero-initialised P when xs holds no elements).
template <typename P, typename Launch, typename Finish>
P reduce(const char* op, const std::vector<Tensor>& xs, Launch&& launch, Finish&& finish) {
  int64_t total = 0;
  const std::vector<SegmentLaunch> launches =
      segment_launches(op, xs, kThreads, kReduceBlocks, &total);
  P out{};
  if (total == 0) return out;
  Scratch partial(static_cast<size_t>(total) * sizeof(P));
  for (const SegmentLaunch& l : launches) {
    launch(l, partial.as<P>() + l.first_block);
    BRAID_CUDA_LAUNCHED(op);
  }
  finish(partial.as<P>(), total);
  BRAID_CUDA_LAUNCHED(op);
  copy_to_host(&out, partial.get(), sizeof(P));
  return out;
}

}  // namespace

float max_abs(const std::vector<Tensor>& xs) {
  return reduce<float>(
      "max_abs", xs,
      [](const SegmentLaunch& l, float* out) {
        max_abs_kernel<<<l.blocks, kThreads, 0, stream()>>>(out, l.batch);
      },
      [](float* p, int64_t n) { max_finish_kernel<<<1, kThreads, 0, stream()>>>(p, n); });
}

__int128 sum_squares_fixed(const std::vector<Tensor>& xs, int shift) {
  const double scale = std::ldexp(1.0, shift);
  const U128 sum = reduce<U128>(
      "sum_squares_fixed", xs,
      [scale](const SegmentLaunch& l, U128* out) {
        sum_squares_fixed_kernel<<<l.blocks, kThreads, 0, stream()>>>(out, l.batch, scale);
      },
      [](U128* p, int64_t n) { sum_finish_kernel<<<1, kThreads, 0, stream()>>>(p, n); });
  // Modular 128-bit arithmetic: the exact total whenever it fits (always, for terms < 2^55).
  return static_cast<__int128>((static_cast<unsigned __int128>(sum.hi) << 64) | sum.lo);
}

void scale(std::vector<Tensor>& xs, float alpha) {
  const char* op = "scale";
  int64_t total = 0;
  for (const SegmentLaunch& l : segment_launches(op, xs, kThreads, kMapBlocks, &total)) {
    scale_kernel<<<l.blocks, kThreads, 0, stream()>>>(l.batch, alpha);
    BRAID_CUDA_LAUNCHED(op);
  }
}

float max_abs(const Tensor& x) {
  check_cuda("max_abs", {&x});
  check_float("max_abs", "x", x);
  return max_abs(std::vector<Tensor>{x});
}

__int128 sum_squares_fixed(const Tensor& x, int shift) {
  check_cuda("sum_squares_fixed", {&x});
  check_float("sum_squares_fixed", "x", x);
  return sum_squares_fixed(std::vector<Tensor>{x}, shift);
}

}  // namespace braid::kernels::cuda
