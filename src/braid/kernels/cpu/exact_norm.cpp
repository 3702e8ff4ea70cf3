// Exact sums of squares for gradient norms (Note [Exact norm]).
//
//   max_abs(x):              max |x_i|, +inf when any element is inf or nan
//   sum_squares_fixed(x, s): sum_i floor(x_i^2 * 2^s), an exact integer
//
// Note [Exact norm]: the global gradient norm must be the same bits whether one rank holds a
// gradient whole (DDP) or N ranks hold pieces of it cut anywhere (ZeRO shards, hybrid
// sub-shards), or clipping would make DDP and ZeRO diverge. Floating-point sums depend on how
// the elements are grouped; integer sums do not. So each square x^2 (exact in f64 for f32,
// bf16 and f16 inputs: 24-bit mantissas give 48-bit products) is scaled by a power of two chosen
// from the global max |x| (shift = 55 - 2 e where max < 2^e, so every term is < 2^55), truncated
// to an integer, and the integers are summed exactly: 128 terms per int64 block sum (< 2^62),
// block sums in __int128. Ranks combine their totals with integer all-reduces. A term loses
// less than one unit, 2^(2e - 55) < max^2 2^-53 (as max >= 2^(e-1)), and the sum is at least
// max^2, so the relative error of the sum of squares is below n 2^-53 (about 1e-8 for 10^8
// parameters: an f64 sum's own worst case) and, unlike a float sum, the result is the same for
// every split of the elements.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "braid/kernels/cpu/common.h"
#include "braid/kernels/device.h"
#include "braid/kernels/ops.h"

namespace braid::kernels {

using namespace cpu;

float max_abs(const Tensor& x) {
  BRAID_DEVICE_DISPATCH(max_abs, (x), &x);
  const char* op = "max_abs";
  check_cpu(op, {&x});
  check_float(op, "x", x);
  const int64_t n = x.numel();
  float m = 0.0f;
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    // in f32 blocks for bf16/f16 (Note [Blocked loops]); a max is the same in any order
#pragma omp parallel for schedule(static) reduction(max : m)
    for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
      const int64_t k = std::min(kBlock, n - i0);
      float buf[kBlock];
      const auto v = f32_in(p + i0, k, buf);
#pragma omp simd reduction(max : m)
      for (int64_t i = 0; i < k; ++i) {
        const float a = std::fabs(v[i]);
        m = std::max(m, a == a ? a : std::numeric_limits<float>::infinity());  // nan -> inf
      }
    }
  });
  return m;
}

namespace {
constexpr int kMaxShifts = 8;

// sums[k] = sum_i floor(x_i^2 * 2^shifts[k]) for k < count, in one pass over x on the host.
// Each term is taken once, at the largest shift, as an integer t = floor(x^2 2^max), and at a
// shift d below it as t >> d: floor(a / 2^d) = floor(floor(a) / 2^d) for a >= 0, so these are
// the integers one call per shift gives (scaling by a power of two is exact in f64).
void host_sums_of_squares(const Tensor& x, const int* shifts, int count, __int128* sums) {
  const char* op = "sum_squares_fixed";
  check_cpu(op, {&x});
  check_float(op, "x", x);
  if (count == 0) return;
  constexpr int64_t kTerms = 128;  // 128 terms < 2^55 each: a block sum < 2^62
  const int64_t n = x.numel(), nblocks = (n + kTerms - 1) / kTerms;
  const int top = *std::max_element(shifts, shifts + count);
  const double scale = std::ldexp(1.0, top);
  int drop[kMaxShifts];  // below the top shift; a term < 2^55 shifted 63 is 0
  for (int k = 0; k < count; ++k) drop[k] = std::min(top - shifts[k], 63);
  std::vector<int64_t> block_sum(static_cast<size_t>(nblocks * count));
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nblocks; ++b) {
      const int64_t i0 = b * kTerms, k = std::min(n, i0 + kTerms) - i0;
      float buf[kTerms];
      const auto v = f32_in(p + i0, k, buf);  // Note [Blocked loops]
      int64_t term[kTerms];                   // x^2 exact in f64: 24-bit mantissas
#pragma omp simd
      for (int64_t i = 0; i < k; ++i) {
        const double e = v[i];
        term[i] = static_cast<int64_t>(e * e * scale);
      }
      for (int s = 0; s < count; ++s) {
        const int d = drop[s];
        int64_t acc = 0;  // integers: exact in any order
#pragma omp simd reduction(+ : acc)
        for (int64_t i = 0; i < k; ++i) acc += term[i] >> d;
        block_sum[static_cast<size_t>(b * count + s)] = acc;
      }
    }
  });
  for (int s = 0; s < count; ++s) {
    __int128 total = 0;
    for (int64_t b = 0; b < nblocks; ++b) total += block_sum[static_cast<size_t>(b * count + s)];
    sums[s] = total;
  }
}
}  // namespace

__int128 sum_squares_fixed(const Tensor& x, int shift) {
  BRAID_DEVICE_DISPATCH(sum_squares_fixed, (x, shift), &x);
  __int128 sum = 0;
  host_sums_of_squares(x, &shift, 1, &sum);
  return sum;
}

void sum_squares_fixed(const Tensor& x, const int* shifts, int count, __int128* sums) {
  const char* op = "sum_squares_fixed";
  BRAID_CHECK(count >= 0 && count <= kMaxShifts, op, ": ", count, " shifts (at most ", kMaxShifts,
              ")");
  if (real_device({&x})) {  // one launch per shift (Note [Device kernels])
    for (int k = 0; k < count; ++k) sums[k] = sum_squares_fixed(x, shifts[k]);
    return;
  }
  SimulatedDeviceRoute route(op, {&x});
  OpScope scope(op);
  host_sums_of_squares(x, shifts, count, sums);
}

float max_abs(const std::vector<Tensor>& xs) {
  if (const auto d = list_device("max_abs", xs))
    return DeviceCall(*d, "max_abs")(&DeviceKernels::max_abs_list)(xs);
  float m = 0.0f;
  for (const Tensor& x : xs)
    if (x.defined() && x.numel() > 0) m = std::max(m, max_abs(x));
  return m;
}

__int128 sum_squares_fixed(const std::vector<Tensor>& xs, int shift) {
  if (const auto d = list_device("sum_squares_fixed", xs))
    return DeviceCall(*d, "sum_squares_fixed")(&DeviceKernels::sum_squares_fixed_list)(xs, shift);
  __int128 sum = 0;
  for (const Tensor& x : xs)
    if (x.defined() && x.numel() > 0) sum += sum_squares_fixed(x, shift);
  return sum;
}

}  // namespace braid::kernels
