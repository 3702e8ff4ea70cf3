// Element-wise helpers over flat tensors (any shape, same numel).
//   add_forward: out = a + b        axpy: y += alpha * x (dtypes may differ)
//   scale: x *= alpha               sum_squares: sum x^2 in f64, fixed summation order
#include <algorithm>

#include "braid/kernels/cpu/common.h"
#include "braid/kernels/ops.h"

namespace braid::kernels {

using namespace cpu;

void add_forward(Tensor& out, const Tensor& a, const Tensor& b) {
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
    for (int64_t i = 0; i < n; ++i) st(&po[i], ld(&pa[i]) + ld(&pb[i]));
  });
}

void axpy(Tensor& y, const Tensor& x, float alpha) {
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
      for (int64_t i = 0; i < n; ++i) st(&py[i], ld(&py[i]) + alpha * ld(&px[i]));
    });
  });
}

void scale(Tensor& x, float alpha) {
  const char* op = "scale";
  check_cpu(op, {&x});
  check_float(op, "x", x);
  int64_t n = x.numel();
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* p = x.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) st(&p[i], alpha * ld(&p[i]));
  });
}

double sum_squares(const Tensor& x) {
  const char* op = "sum_squares";
  check_cpu(op, {&x});
  check_float(op, "x", x);
  // Fixed blocks summed in block order: the result does not depend on the thread count.
  constexpr int64_t kBlock = 1 << 14;
  int64_t n = x.numel(), nblocks = (n + kBlock - 1) / kBlock;
  double* partial = scratch_f64(0, nblocks);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      int64_t i0 = blk * kBlock, i1 = std::min(n, i0 + kBlock);
      double acc = 0;
#pragma omp simd reduction(+ : acc)
      for (int64_t i = i0; i < i1; ++i) {
        double v = ld(&p[i]);
        acc += v * v;
      }
      partial[blk] = acc;
    }
  });
  double total = 0;
  for (int64_t blk = 0; blk < nblocks; ++blk) total += partial[blk];
  return total;
}

}  // namespace braid::kernels
