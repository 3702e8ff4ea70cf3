// Fused optimiser steps over flat buffers (torch.optim semantics).
//   param[P] f32, grad[P] f32, bf16 or f16, m[P], v[P], momentum_buf[P] f32
//   AdamW (decoupled decay, bias-corrected at 1-based step t):
//     p -= lr * wd * p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//     p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
//   SGD: g' = g + wd p; buf = momentum buf + g' (buf = g' on the first step);
//     p -= lr * buf   (nesterov: p -= lr (g' + momentum buf)); momentum == 0: p -= lr g'
#include <cmath>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "braid/kernels/cpu/common.h"
#include "braid/kernels/device.h"
#include "braid/kernels/ops.h"

namespace braid::kernels {

using namespace cpu;

namespace {

// The AdamW update over every element, and with `compute` (bf16 or f16) each updated master
// rounded into it in the same pass (Note [Compute copy in the step], optim/optimizer.h).
void adamw_cpu(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1,
               float beta2, float eps, float weight_decay, int64_t t, Tensor* compute) {
  const char* op = "adamw_step";
  check_cpu(op, {&param, &grad, &m, &v, compute});
  check_dtype(op, "param", param, DType::f32);
  check_float(op, "grad", grad);
  check_dtype(op, "m", m, DType::f32);
  check_dtype(op, "v", v, DType::f32);
  int64_t n = param.numel();
  check_numel(op, "grad", grad, n);
  check_numel(op, "m", m, n);
  check_numel(op, "v", v, n);
  if (compute) {
    check_numel(op, "compute", *compute, n);
    BRAID_CHECK(compute->dtype() == DType::bf16 || compute->dtype() == DType::f16, op,
                ": compute must be bf16 or f16, got ", dtype_name(compute->dtype()));
  }
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
  auto loop = [&](auto gtag, auto c) {  // c: bf16*, f16* or nullptr
    using G = decltype(gtag);
    const G* g = grad.data<G>();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      float gi = ld(&g[i]);
      float mi = beta1 * pm[i] + (1.0f - beta1) * gi;
      float vi = beta2 * pv[i] + (1.0f - beta2) * gi * gi;
      pm[i] = mi;
      pv[i] = vi;
      const float pi = p[i] * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
      p[i] = pi;
      if constexpr (!std::is_same_v<decltype(c), std::nullptr_t>) st(&c[i], pi);
    }
  };
  dispatch_float(grad.dtype(), op, [&](auto gtag) {
    if (!compute) return loop(gtag, nullptr);
    if (compute->dtype() == DType::bf16) return loop(gtag, compute->data<bf16>());
    loop(gtag, compute->data<f16>());
  });
}

}  // namespace

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1,
                float beta2, float eps, float weight_decay, int64_t t) {
  BRAID_DEVICE_DISPATCH(adamw_step, (param, grad, m, v, lr, beta1, beta2, eps, weight_decay, t),
                        &param, &grad, &m, &v);
  adamw_cpu(param, grad, m, v, lr, beta1, beta2, eps, weight_decay, t, nullptr);
}

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1,
                float beta2, float eps, float weight_decay, int64_t t, Tensor& compute) {
  if (real_device({&param, &grad, &m, &v, &compute})) {  // the device's step, then its cast
    adamw_step(param, grad, m, v, lr, beta1, beta2, eps, weight_decay, t);
    cast(compute, param);
    return;
  }
  SimulatedDeviceRoute route("adamw_step", {&param, &grad, &m, &v, &compute});
  OpScope scope("adamw_step");
  adamw_cpu(param, grad, m, v, lr, beta1, beta2, eps, weight_decay, t, &compute);
}

void adamw_step(const std::vector<AdamWSlice>& slices, float beta1, float beta2, float eps,
                int64_t t) {
  std::vector<Tensor> params;
  for (const AdamWSlice& s : slices) params.push_back(*s.param);
  if (const auto d = list_device("adamw_step", params))
    return DeviceCall(*d, "adamw_step")(&DeviceKernels::adamw_step_list)(slices, beta1, beta2, eps,
                                                                         t);
  for (const AdamWSlice& s : slices) {
    if (s.compute) {
      adamw_step(*s.param, *s.grad, *s.m, *s.v, s.lr, beta1, beta2, eps, s.weight_decay, t,
                 *s.compute);
    } else {
      adamw_step(*s.param, *s.grad, *s.m, *s.v, s.lr, beta1, beta2, eps, s.weight_decay, t);
    }
  }
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
