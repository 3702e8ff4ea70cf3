// matmul and the linear layer on the GPU: one cuBLASLt GEMM each (gemm.cpp), the bias fused
// as an epilogue in the forward. Arguments were checked by the ops.h entry points
// (cpu/matmul.cpp, cpu/linear.cpp) before they dispatched here.
#include "braid/kernels/checks.h"
#include "braid/kernels/cuda/cuda_ops.h"
#include "braid/kernels/cuda/gemm.h"
#include "braid/kernels/cuda/op_profile.h"
#include "braid/kernels/cuda/runtime.h"

namespace braid::kernels::cuda {

void matmul(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha,
            float beta) {
  check_cuda("matmul", {&c, &a, &b});
  GemmArgs g;
  g.ab = g.c = a.dtype();
  g.a = a.device_data(), g.b = b.device_data(), g.c_ptr = c.device_data();
  g.m = c.size(0), g.n = c.size(1), g.k = trans_a ? a.size(0) : a.size(1);
  g.trans_a = trans_a, g.trans_b = trans_b;
  g.lda = a.size(1), g.ldb = b.size(1), g.ldc = c.size(1);
  g.alpha = alpha, g.beta = beta;
  gemm(g);
}

void linear_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor* bias) {
  check_cuda("linear_forward", {&out, &inp, &weight, bias});
  GemmArgs g;
  g.ab = g.c = inp.dtype();
  g.a = inp.device_data(), g.b = weight.device_data(), g.c_ptr = out.device_data();
  g.m = rows_of(inp), g.n = weight.size(0), g.k = weight.size(1);
  g.trans_b = true;
  if (bias) g.epilogue = Epilogue::bias, g.bias = bias->device_data();
  gemm(g);
}

void linear_backward(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight) {
  check_cuda("linear_backward", {dinp, dweight, dbias, &dout, &inp, &weight});
  const int64_t N = rows_of(inp), C = weight.size(1), OC = weight.size(0);
  if (dinp) {  // dinp[N,C] += dout[N,OC] @ weight[OC,C]
    OpTimer t("linear/dinp_gemm");
    GemmArgs g;
    g.ab = g.c = inp.dtype();
    g.a = dout.device_data(), g.b = weight.device_data(), g.c_ptr = dinp->device_data();
    g.m = N, g.n = C, g.k = OC, g.beta = 1.0f;
    gemm(g);
  }
  if (dweight) {  // dweight[OC,C] += dout^T @ inp, in dweight's dtype (f32 or inp's)
    OpTimer t("linear/dweight_gemm");
    GemmArgs g;
    g.ab = inp.dtype(), g.c = dweight->dtype();
    g.a = dout.device_data(), g.b = inp.device_data(), g.c_ptr = dweight->device_data();
    g.m = OC, g.n = C, g.k = N, g.trans_a = true, g.beta = 1.0f;
    gemm(g);
  }
  if (dbias) {
    OpTimer t("linear/dbias");
    bias_add_backward(*dbias, dout.view(Shape{N, OC}));
  }
}

}  // namespace braid::kernels::cuda
