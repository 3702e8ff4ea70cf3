// Bias added after a reduction (a tensor-parallel row-parallel layer adds its bias once, after
// the partial sums are combined, Note [Tensor-parallel layout] in nn/tensor_parallel.h).
//   forward:  out[N,C] = x[N,C] + bias[C]
//   backward: dbias[C] += sum_n dout[n]   (add_column_sums, as linear_backward's dbias)
#include <algorithm>

#include "braid/kernels/cpu/common.h"
#include "braid/kernels/device.h"
#include "braid/kernels/ops.h"

namespace braid::kernels {

using namespace cpu;

void bias_add_forward(Tensor& out, const Tensor& x, const Tensor& bias) {
  const char* op = "bias_add_forward";
  check_float(op, "x", x);
  check_same_dtype(op, "bias", bias, "x", x);
  check_same_dtype(op, "out", out, "x", x);
  const int64_t C = bias.numel(), N = rows_of(x);
  BRAID_CHECK(bias.dim() == 1 && cols_of(x) == C && out.numel() == x.numel(), op, ": x ",
              x.shape().str(), ", bias ", bias.shape().str(), " and out ", out.shape().str(),
              " do not fit (need x[N,C], bias[C], out like x)");
  BRAID_DEVICE_DISPATCH(bias_add_forward, (out, x, bias), &out, &x, &bias);
  check_cpu(op, {&out, &x, &bias});
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const T* pb = bias.data<T>();
    T* po = out.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) st(&po[n * C + c], ld(&px[n * C + c]) + ld(&pb[c]));
  });
}

void bias_add_backward(Tensor& dbias, const Tensor& dout) {
  const char* op = "bias_add_backward";
  check_float(op, "dout", dout);
  check_param_grad(op, "dbias", dbias, "dout", dout);
  const int64_t C = dbias.numel(), N = rows_of(dout);
  BRAID_CHECK(cols_of(dout) == C, op, ": dout ", dout.shape().str(), " does not fit dbias ",
              dbias.shape().str());
  BRAID_DEVICE_DISPATCH(bias_add_backward, (dbias, dout), &dbias, &dout);
  check_cpu(op, {&dbias, &dout});
  dispatch_float(dout.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    add_column_sums(dbias, dout.data<T>(), N, C);
  });
}

}  // namespace braid::kernels
