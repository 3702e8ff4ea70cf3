// Fused optimiser steps over flat buffers (torch.optim semantics).
//   param[P] f32, grad[P] f32, bf16 or f16, m[P], v[P], momentum_buf[P] f32
//   AdamW (decoupled decay, bias-corrected at 1-based step t):
//     p -= lr * wd * p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//     p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
//   SGD: g' = g + wd p; buf = momentum buf + g' (buf = g' on the first step);
//     p -= lr * buf   (nesterov: p -= lr (g' + momentum buf)); momentum == 0: p -= lr g'
#include <cmath>

#include "braid/kernels/cpu/common.h"
#include "braid/kernels/device.h"
#include "braid/kernels/ops.h"

namespace braid::kernels {

using namespace cpu;

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1,
                float beta2, float eps, float weight_decay, int64_t t) {
  BRAID_DEVICE_DISPATCH(adamw_step, (param, grad, m, v, lr, beta1, beta2, eps, weight_decay, t),
                        &param, &grad, &m, &v);
  const char* op = "adamw_step";
  check_cpu(op, {&param, &grad, &m, &v});
  check_dtype(op, "param", param, DType::f32);
  check_float(op, "grad", grad);
  check_dtype(op, "m", m, DType::f32);
  check_dtype(op, "v", v, DType::f32);
  int64_t n = param.numel();
  check_numel(op, "grad", grad, n);
  check_numel(op, "m", m, n);
  check_numel(op, "v", v, n);
  BRAID_CHECK(t >= 1, op, ": step t must be >= 1 (1-based), got ", t);
  // torch: bias_correction2_sqrt = sqrt(1 - b2^t); step = lr / bc1;
  // p -= step * m / (sqrt(v) / bc2_sqrt + eps)
  double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
  double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
  float step_size = static_cast<float>(lr / bc1);
  float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  float decay = 1.0f - lr * weight_decay;
  float* p = param.data<float>();
  float* pm = m.data<float>();
  float* pv = v.data<float>();
  dispatch_float(grad.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* g = grad.data<T>();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      float gi = ld(&g[i]);
      float mi = beta1 * pm[i] + (1.0f - beta1) * gi;
      float vi = beta2 * pv[i] + (1.0f - beta2) * gi * gi;
      pm[i] = mi;
      pv[i] = vi;
      p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
    }
  });
}

void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buf, float lr, float momentum,
              float weight_decay, bool nesterov, bool first_step) {
  BRAID_DEVICE_DISPATCH(
      sgd_step, (param, grad, momentum_buf, lr, momentum, weight_decay, nesterov, first_step),
      &param, &grad, &momentum_buf);
  const char* op = "sgd_step";
  check_cpu(op, {&param, &grad, &momentum_buf});
  check_dtype(op, "param", param, DType::f32);
  check_float(op, "grad", grad);
  int64_t n = param.numel();
  check_numel(op, "grad", grad, n);
  bool use_buf = momentum != 0.0f;
  if (use_buf) {
    check_dtype(op, "momentum_buf", momentum_buf, DType::f32);
    check_numel(op, "momentum_buf", momentum_buf, n);
  }
  float* p = param.data<float>();
  float* b = use_buf ? momentum_buf.data<float>() : nullptr;
  dispatch_float(grad.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* g = grad.data<T>();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      float gi = ld(&g[i]) + weight_decay * p[i];
      if (use_buf) {
        float bi = first_step ? gi : momentum * b[i] + gi;
        b[i] = bi;
        gi = nesterov ? gi + momentum * bi : bi;
      }
      p[i] -= lr * gi;
    }
  });
}

}  // namespace braid::kernels
