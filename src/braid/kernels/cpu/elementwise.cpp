// Element-wise helpers over flat tensors (any shape, same numel).
//   add_forward: out = a + b        axpy: y += alpha * x (dtypes may differ)
//   scale: x *= alpha               sum_squares: sum x^2 in f64, fixed summation order
#include <algorithm>

#include "braid/kernels/cpu/common.h"
#include "braid/kernels/device.h"
#include "braid/kernels/ops.h"

namespace braid::kernels {

using namespace cpu;

void add_forward(Tensor& out, const Tensor& a, const Tensor& b) {
  BRAID_DEVICE_DISPATCH(add_forward, (out, a, b), &out, &a, &b);
  const char* op = "add_forward";
  check_cpu(op, {&out, &a, &b});
  check_float(op, "a", a);
  check_same_dtype(op, "b", b, "a", a);
  check_same_dtype(op, "out", out, "a", a);
  BRAID_CHECK(a.numel() == b.numel() && out.numel() == a.numel(), op, ": a ", a.shape().str(),
              ", b ", b.shape().str(), " and out ", out.shape().str(), " differ in size");
  int64_t n = a.numel();
  dispatch_float(a.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t i0 = 0; i0 < n; i0 += kBlock) {  // Note [Blocked loops]
      const int64_t m = std::min(kBlock, n - i0);
      float ab[kBlock], bb[kBlock], ob[kBlock];
      const auto av = f32_in(pa + i0, m, ab);
      const auto bv = f32_in(pb + i0, m, bb);
      float* ov = f32_out(po + i0, ob);
      for (int64_t i = 0; i < m; ++i) ov[i] = av[i] + bv[i];
      commit(po + i0, ov, m);
    }
  });
}

void axpy(Tensor& y, const Tensor& x, float alpha) {
  BRAID_DEVICE_DISPATCH(axpy, (y, x, alpha), &y, &x);
  const char* op = "axpy";
  check_cpu(op, {&y, &x});
  check_float(op, "y", y);
  check_float(op, "x", x);
  BRAID_CHECK(x.numel() == y.numel(), op, ": y ", y.shape().str(), " and x ", x.shape().str(),
              " differ in size");
  int64_t n = x.numel();
  dispatch_float(y.dtype(), op, [&](auto ytag) {
    dispatch_float(x.dtype(), op, [&](auto xtag) {
      using TY = decltype(ytag);
      using TX = decltype(xtag);
      TY* py = y.data<TY>();
      const TX* px = x.data<TX>();
#pragma omp parallel for schedule(static)
      for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
        const int64_t m = std::min(kBlock, n - i0);
        float xb[kBlock], y0b[kBlock], yb[kBlock];
        const auto xv = f32_in(px + i0, m, xb);
        const auto y0 = f32_in(py + i0, m, y0b);  // the same memory as yv for f32
        float* yv = f32_out(py + i0, yb);
        for (int64_t i = 0; i < m; ++i) yv[i] = y0[i] + alpha * xv[i];
        commit(py + i0, yv, m);
      }
    });
  });
}

void scale(std::vector<Tensor>& xs, float alpha) {
  if (const auto d = list_device("scale", xs))
    return DeviceCall(*d, "scale")(&DeviceKernels::scale_list)(xs, alpha);
  for (Tensor& x : xs)
    if (x.defined() && x.numel() > 0) scale(x, alpha);
}

void scale(Tensor& x, float alpha) {
  BRAID_DEVICE_DISPATCH(scale, (x, alpha), &x);
  const char* op = "scale";
  check_cpu(op, {&x});
  check_float(op, "x", x);
  int64_t n = x.numel();
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* p = x.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
      const int64_t m = std::min(kBlock, n - i0);
      float b0[kBlock], b[kBlock];
      const auto v0 = f32_in(p + i0, m, b0);  // the same memory as v for f32
      float* v = f32_out(p + i0, b);
      for (int64_t i = 0; i < m; ++i) v[i] = alpha * v0[i];
      commit(p + i0, v, m);
    }
  });
}

double sum_squares(const Tensor& x) {
  BRAID_DEVICE_DISPATCH(sum_squares, (x), &x);
  const char* op = "sum_squares";
  check_cpu(op, {&x});
  check_float(op, "x", x);
  // Fixed blocks summed in block order: the result does not depend on the thread count.
  constexpr int64_t kSumBlock = 1 << 14;
  int64_t n = x.numel(), nblocks = (n + kSumBlock - 1) / kSumBlock;
  double* partial = scratch_f64(0, nblocks);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      const int64_t i0 = blk * kSumBlock, i1 = std::min(n, i0 + kSumBlock);
      double acc = 0;
      // bf16/f16 go through f32 pieces of 2048 (Note [Blocked loops]), each its own vector sum
      constexpr int64_t kPiece = std::is_same_v<T, float> ? kSumBlock : 2048;
      for (int64_t j0 = i0; j0 < i1; j0 += kPiece) {
        const int64_t m = std::min(i1 - j0, kPiece);
        float buf[std::is_same_v<T, float> ? 1 : kPiece];
        const auto v = f32_in(p + j0, m, buf);
#pragma omp simd reduction(+ : acc)
        for (int64_t i = 0; i < m; ++i) {
          double e = v[i];
          acc += e * e;
        }
      }
      partial[blk] = acc;
    }
  });
  double total = 0;
  for (int64_t blk = 0; blk < nblocks; ++blk) total += partial[blk];
  return total;
}

}  // namespace braid::kernels
