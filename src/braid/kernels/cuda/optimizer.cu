// Fused optimiser steps on the device (cuda_ops.h), the math of cpu/optimizer_steps.cpp in the
// same order: param, m, v, momentum_buf f32; grad f32, bf16 or f16. One grid-stride pass, 8
// elements per step (128-bit accesses) when every buffer is 16-byte aligned and P % 8 == 0.
//   AdamW: p = p (1 - lr wd) - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps), bc = 1 - beta^t
//   SGD:   g' = g + wd p; buf = momentum buf + g' (g' on the first step); p -= lr buf
//          (nesterov: p -= lr (g' + momentum buf))
#include <cmath>

#include "braid/kernels/checks.h"
#include "braid/kernels/cuda/common.cuh"
#include "braid/kernels/cuda/cuda_ops.h"

namespace braid::kernels::cuda {

namespace {

constexpr int kThreads = 256;

struct AdamW {
  float beta1, beta2, eps, step_size, bc2_sqrt, decay;
  __device__ __forceinline__ void operator()(float& p, float& m, float& v, float g) const {
    const float mi = beta1 * m + (1.0f - beta1) * g;
    const float vi = beta2 * v + (1.0f - beta2) * g * g;
    m = mi;
    v = vi;
    p = p * decay - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
  }
};

struct Sgd {
  float lr, momentum, weight_decay;
  bool use_buf, nesterov, first_step;
  __device__ __forceinline__ void operator()(float& p, float& b, float, float g) const {
    float gi = g + weight_decay * p;
    if (use_buf) {
      const float bi = first_step ? gi : momentum * b + gi;
      b = bi;
      gi = nesterov ? gi + momentum * bi : bi;
    }
    p -= lr * gi;
  }
};

// p, s1, s2 f32 state (s1/s2 may be null when the step does not use them: then never read or
// written); g the gradient. vec: n % 8 == 0 and every pointer 16-byte aligned.
template <typename T, typename Step>
__global__ void step_kernel(float* p, float* s1, float* s2, const T* g, int64_t n, bool vec,
                            Step step) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vec) {
    for (int64_t i = first * 8; i < n; i += stride * 8) {
      float gv[8];
      if constexpr (sizeof(T) == 4) {
        const Pack128<float> a = load128(g + i), b = load128(g + i + 4);
#pragma unroll
        for (int k = 0; k < 4; ++k) gv[k] = a.v[k], gv[4 + k] = b.v[k];
      } else {
        const Pack128<T> a = load128(g + i);
#pragma unroll
        for (int k = 0; k < 8; ++k) gv[k] = a.get(k);
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t j = i + 4 * h;
        Pack128<float> pp = load128(p + j), a{}, b{};
        if (s1) a = load128(s1 + j);
        if (s2) b = load128(s2 + j);
#pragma unroll
        for (int k = 0; k < 4; ++k) step(pp.v[k], a.v[k], b.v[k], gv[4 * h + k]);
        store128(p + j, pp);
        if (s1) store128(s1 + j, a);
        if (s2) store128(s2 + j, b);
      }
    }
  } else {
    for (int64_t i = first; i < n; i += stride) {
      float pi = p[i], a = s1 ? s1[i] : 0.0f, b = s2 ? s2[i] : 0.0f;
      step(pi, a, b, ld(g + i));
      p[i] = pi;
      if (s1) s1[i] = a;
      if (s2) s2[i] = b;
    }
  }
}

template <typename Step>
void launch_step(const char* op, const Tensor& grad, float* p, float* s1, float* s2, int64_t n,
                 Step step) {
  if (n <= 0) return;
  dispatch_float(grad.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* g = ptr<T>(grad);
    const bool vec = packable<bf16_t>(n, {p, s1, s2, g});  // n % 8 == 0, 16-byte aligned
    step_kernel<<<grid_for(vec ? n / 8 : n, kThreads), kThreads, 0, stream()>>>(p, s1, s2, g, n,
                                                                                vec, step);
    BRAID_CUDA_LAUNCHED(op);
  });
}

}  // namespace

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1,
                float beta2, float eps, float weight_decay, int64_t t) {
  const char* op = "adamw_step";
  check_cuda(op, {&param, &grad, &m, &v});
  check_dtype(op, "param", param, DType::f32);
  check_float(op, "grad", grad);
  check_dtype(op, "m", m, DType::f32);
  check_dtype(op, "v", v, DType::f32);
  const int64_t n = param.numel();
  check_numel(op, "grad", grad, n);
  check_numel(op, "m", m, n);
  check_numel(op, "v", v, n);
  BRAID_CHECK(t >= 1, op, ": step t must be >= 1 (1-based), got ", t);
  // the host constants of the CPU kernel, bit for bit
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
  AdamW step{};
  step.beta1 = beta1, step.beta2 = beta2, step.eps = eps;
  step.step_size = static_cast<float>(lr / bc1);
  step.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  step.decay = 1.0f - lr * weight_decay;
  launch_step(op, grad, ptr<float>(param), ptr<float>(m), ptr<float>(v), n, step);
}

void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buf, float lr, float momentum,
              float weight_decay, bool nesterov, bool first_step) {
  const char* op = "sgd_step";
  check_cuda(op, {&param, &grad, &momentum_buf});
  check_dtype(op, "param", param, DType::f32);
  check_float(op, "grad", grad);
  const int64_t n = param.numel();
  check_numel(op, "grad", grad, n);
  const bool use_buf = momentum != 0.0f;
  if (use_buf) {
    check_dtype(op, "momentum_buf", momentum_buf, DType::f32);
    check_numel(op, "momentum_buf", momentum_buf, n);
  }
  Sgd step{lr, momentum, weight_decay, use_buf, nesterov, first_step};
  launch_step(op, grad, ptr<float>(param), use_buf ? ptr<float>(momentum_buf) : nullptr, nullptr, n,
              step);
}

}  // namespace braid::kernels::cuda
