// Column slices of a row-major matrix (GPT-2's fused qkv projection).
//   inp[N,CT], out[N,W]: copy_columns out = inp[:, start:start+W]
//   dinp[N,CT], dout[N,W]: add_columns dinp[:, start:start+W] += dout
//   out[N,CT], inp[N,W]:   set_columns out[:, start:start+W] = inp
#include <algorithm>
#include <cstring>

#include "braid/kernels/cpu/common.h"
#include "braid/kernels/device.h"
#include "braid/kernels/ops.h"

namespace braid::kernels {

using namespace cpu;

namespace {

void check_columns(const char* op, const char* wide_name, const Tensor& wide,
                   const char* narrow_name, const Tensor& narrow, int64_t start) {
  check_float(op, wide_name, wide);
  check_same_dtype(op, narrow_name, narrow, wide_name, wide);
  int64_t W = cols_of(narrow), CT = cols_of(wide);
  BRAID_CHECK(rows_of(wide) == rows_of(narrow), op, ": ", wide_name, " ", wide.shape().str(),
              " and ", narrow_name, " ", narrow.shape().str(), " have different row counts");
  BRAID_CHECK(start >= 0 && start + W <= CT, op, ": columns [", start, ", ", start + W,
              ") out of range for ", wide_name, " ", wide.shape().str());
}

}  // namespace

void copy_columns(Tensor& out, const Tensor& inp, int64_t start) {
  BRAID_DEVICE_DISPATCH(copy_columns, (out, inp, start), &out, &inp);
  const char* op = "copy_columns";
  check_cpu(op, {&out, &inp});
  check_columns(op, "inp", inp, "out", out, start);
  int64_t N = rows_of(out), W = cols_of(out), CT = cols_of(inp);
  dispatch_float(inp.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* src = inp.data<T>() + start;
    T* dst = out.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n)
      std::memcpy(dst + n * W, src + n * CT, static_cast<size_t>(W) * sizeof(T));
  });
}

void add_columns(Tensor& dinp, const Tensor& dout, int64_t start) {
  BRAID_DEVICE_DISPATCH(add_columns, (dinp, dout, start), &dinp, &dout);
  const char* op = "add_columns";
  check_cpu(op, {&dinp, &dout});
  check_columns(op, "dinp", dinp, "dout", dout, start);
  int64_t N = rows_of(dout), W = cols_of(dout), CT = cols_of(dinp);
  dispatch_float(dinp.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* src = dout.data<T>();
    T* dst = dinp.data<T>() + start;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      if constexpr (std::is_same_v<T, float>) {
        for (int64_t w = 0; w < W; ++w) dst[n * CT + w] += src[n * W + w];
      } else {  // Note [Blocked loops]: add_row adds in f32 and rounds once, as st would
        for (int64_t w0 = 0; w0 < W; w0 += kBlock) {
          const int64_t m = std::min(kBlock, W - w0);
          float buf[kBlock];
          load_row(buf, src + n * W + w0, m);
          add_row(dst + n * CT + w0, buf, m);
        }
      }
    }
  });
}

void set_columns(Tensor& out, const Tensor& inp, int64_t start) {
  const char* op = "set_columns";
  check_columns(op, "out", out, "inp", inp, start);  // for the device kernel too
  BRAID_DEVICE_DISPATCH(set_columns, (out, inp, start), &out, &inp);
  check_cpu(op, {&out, &inp});
  int64_t N = rows_of(inp), W = cols_of(inp), CT = cols_of(out);
  dispatch_float(out.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* src = inp.data<T>();
    T* dst = out.data<T>() + start;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n)
      std::memcpy(dst + n * CT, src + n * W, static_cast<size_t>(W) * sizeof(T));
  });
}

}  // namespace braid::kernels
