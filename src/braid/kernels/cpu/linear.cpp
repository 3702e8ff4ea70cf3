// Linear layer, forward and backward, on the GEMM seam (cpu/gemm.h).
//   inp[N,C] (any leading dims), weight[OC,C], bias[OC], out[N,OC]
//   forward:  out = inp @ weight^T + bias (bias fused into the GEMM)
//   backward: dinp += dout @ weight; dweight += dout^T @ inp; dbias += sum_n dout
// bf16, f16: GEMMs accumulate into an f32 scratch that is then rounded (forward) or added
// (backward) into the low-precision tensors; an f32 dweight/dbias (Note [Parameter gradients],
// ops.h) is accumulated into directly (the dweight GEMM runs with beta = 1 on it).
#include "braid/kernels/cpu/common.h"
#include "braid/kernels/cpu/gemm.h"
#include "braid/kernels/device.h"
#include "braid/kernels/ops.h"

namespace braid::kernels {

using namespace cpu;

namespace {

void check_linear(const char* op, const Tensor& inp, const Tensor& weight, int64_t* N, int64_t* C,
                  int64_t* OC) {
  check_float(op, "inp", inp);
  check_same_dtype(op, "weight", weight, "inp", inp);
  BRAID_CHECK(weight.dim() == 2, op, ": weight must be [OC,C], got ", weight.shape().str());
  *C = weight.size(1);
  *OC = weight.size(0);
  BRAID_CHECK(inp.dim() >= 1 && cols_of(inp) == *C, op, ": inp ", inp.shape().str(),
              " has last dimension ", cols_of(inp), " but weight ", weight.shape().str(),
              " expects C=", *C);
  *N = rows_of(inp);
}

}  // namespace

void linear_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor* bias) {
  const char* op = "linear_forward";
  int64_t N, C, OC;
  check_linear(op, inp, weight, &N, &C, &OC);
  check_same_dtype(op, "out", out, "inp", inp);
  BRAID_CHECK(out.numel() == N * OC && cols_of(out) == OC, op, ": out has shape ",
              out.shape().str(), ", expected [", N, ",", OC, "] for inp ", inp.shape().str(),
              " and weight ", weight.shape().str());
  if (bias) {
    check_same_dtype(op, "bias", *bias, "inp", inp);
    check_numel(op, "bias", *bias, OC);
  }
  BRAID_DEVICE_DISPATCH(linear_forward, (out, inp, weight, bias), &out, &inp, &weight, bias);
  check_cpu(op, {&out, &inp, &weight, bias});
  dispatch_float(inp.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const float* b = nullptr;
    if (bias && std::is_same_v<T, float>) {
      b = bias->data<float>();
    } else if (bias) {
      float* bf = scratch(1, OC);
      load_row(bf, bias->data<T>(), OC);
      b = bf;
    }
    if constexpr (std::is_same_v<T, float>) {
      gemm(false, true, N, OC, C, 1.0f, inp.data<float>(), C, weight.data<float>(), C, 0.0f,
           out.data<float>(), OC, b);
    } else {
      float* tmp = scratch(0, N * OC);
      gemm(false, true, N, OC, C, 1.0f, inp.data<T>(), C, weight.data<T>(), C, 0.0f, tmp, OC, b);
      write_back(out.data<T>(), tmp, N * OC, 0.0f);
    }
  });
}

void linear_backward(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight) {
  const char* op = "linear_backward";
  int64_t N, C, OC;
  check_linear(op, inp, weight, &N, &C, &OC);
  check_same_dtype(op, "dout", dout, "inp", inp);
  BRAID_CHECK(dout.numel() == N * OC && cols_of(dout) == OC, op, ": dout has shape ",
              dout.shape().str(), ", expected [", N, ",", OC, "]");
  if (dinp) check_same_dtype(op, "dinp", *dinp, "inp", inp), check_numel(op, "dinp", *dinp, N * C);
  if (dweight) {
    check_param_grad(op, "dweight", *dweight, "inp", inp);
    check_numel(op, "dweight", *dweight, OC * C);
  }
  if (dbias)
    check_param_grad(op, "dbias", *dbias, "inp", inp), check_numel(op, "dbias", *dbias, OC);
  BRAID_DEVICE_DISPATCH(linear_backward, (dinp, dweight, dbias, dout, inp, weight), dinp, dweight,
                        dbias, &dout, &inp, &weight);
  check_cpu(op, {dinp, dweight, dbias, &dout, &inp, &weight});
  dispatch_float(inp.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* g = dout.data<T>();
    if (dinp) {
      if constexpr (std::is_same_v<T, float>) {
        gemm(false, false, N, C, OC, 1.0f, g, OC, weight.data<T>(), C, 1.0f, dinp->data<T>(), C);
      } else {
        float* tmp = scratch(0, N * C);
        gemm(false, false, N, C, OC, 1.0f, g, OC, weight.data<T>(), C, 0.0f, tmp, C);
        write_back(dinp->data<T>(), tmp, N * C, 1.0f);
      }
    }
    if (dweight && dweight->dtype() == DType::f32) {
      gemm(true, false, OC, C, N, 1.0f, g, OC, inp.data<T>(), C, 1.0f, dweight->data<float>(), C);
    } else if (dweight) {
      float* tmp = scratch(0, OC * C);
      gemm(true, false, OC, C, N, 1.0f, g, OC, inp.data<T>(), C, 0.0f, tmp, C);
      write_back(dweight->data<T>(), tmp, OC * C, 1.0f);
    }
    if (dbias) add_column_sums(*dbias, g, N, OC);
  });
}

}  // namespace braid::kernels
