// matmul and the linear layer on the GPU: one cuBLASLt GEMM each (gemm.cpp), the bias fused
// as an epilogue in the forward, and its gradient in the backward's weight-gradient GEMM
// (BGRADB: the GEMM reduces dout over rows while it reads it for dweight, instead of a second
// pass over dout; 1.7 ms a step of GPT-2 124M at batch 16 x 1024 on an H100 was that pass).
// The fused gradient is taken where dweight is f32 (the sums are then f32, as the separate
// kernel's partials) and cuBLASLt has an algorithm for it; elsewhere bias_add_backward runs.
// Opt-in for now: BRAID_CUDA_FUSION=1 (runtime.h, fusion_enabled).
// Arguments were checked by the ops.h entry points (cpu/matmul.cpp, cpu/linear.cpp) before
// they dispatched here.
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
    GemmArgs g;
    g.ab = inp.dtype(), g.c = dweight->dtype();
    g.a = dout.device_data(), g.b = inp.device_data(), g.c_ptr = dweight->device_data();
    g.m = OC, g.n = C, g.k = N, g.trans_a = true, g.beta = 1.0f;
    bool fused = false;
    if (dbias && N > 0 && g.c == DType::f32 && fusion_enabled()) {
      OpTimer t("linear/dweight_dbias_gemm");
      Scratch sums(static_cast<size_t>(OC) * sizeof(float));
      GemmArgs with_sums = g;  // sums[o] = sum_n dout[n, o]
      with_sums.epilogue = Epilogue::bias_grad, with_sums.dbias = sums.get();
      fused = try_gemm(with_sums);  // false: cuBLASLt has no algorithm for it
      if (fused) {
        add_column_sums(*dbias, sums.as<float>());
        dbias = nullptr;
      }
    }
    if (!fused) {
      OpTimer t("linear/dweight_gemm");
      gemm(g);
    }
  }
  if (dbias) {
    OpTimer t("linear/dbias");
    bias_add_backward(*dbias, dout.view(Shape{N, OC}));
  }
}

}  // namespace braid::kernels::cuda
