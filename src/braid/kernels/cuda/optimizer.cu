// Fused optimiser steps on the device (cuda_ops.h), the math of cpu/optimizer_steps.cpp in the
// same order: param, m, v, momentum_buf f32; grad f32, bf16 or f16. One grid-stride pass, 8
// elements per step (128-bit accesses) when every buffer is 16-byte aligned and P % 8 == 0.
// AdamW runs over a list of slices, one launch per kMaxAdamWSegments of them (Note [Multi-tensor
// launches], multi_tensor.cuh; one slice is a list of one), writing the rounded masters into a
// slice's compute copy in the same pass where it has one. SGD runs one slice a launch.
//   AdamW: p = p (1 - lr wd) - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps), bc = 1 - beta^t
//   SGD:   g' = g + wd p; buf = momentum buf + g' (g' on the first step); p -= lr buf
//          (nesterov: p -= lr (g' + momentum buf))
#include <cmath>
#include <type_traits>
#include <vector>

#include "braid/kernels/checks.h"
#include "braid/kernels/cuda/common.cuh"
#include "braid/kernels/cuda/cuda_ops.h"
#include "braid/kernels/cuda/multi_tensor.cuh"

namespace braid::kernels::cuda {

namespace {

constexpr int kThreads = 256;

// Every operation is an explicit round-to-nearest intrinsic, which the compiler never fuses into
// an FMA: left to itself it may contract a product and a sum differently in each kernel that
// inlines the step (two kernels that did differed in the last place on an H100), and a step's
// bits must not depend on the kernel that runs it.
struct AdamW {
  float beta1, beta2, eps, step_size, bc2_sqrt, decay;
  __device__ __forceinline__ void operator()(float& p, float& m, float& v, float g) const {
    const float mi = __fadd_rn(__fmul_rn(beta1, m), __fmul_rn(1.0f - beta1, g));
    const float vi = __fadd_rn(__fmul_rn(beta2, v), __fmul_rn(__fmul_rn(1.0f - beta2, g), g));
    m = mi;
    v = vi;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
    p = __fsub_rn(__fmul_rn(p, decay), __fdiv_rn(__fmul_rn(step_size, mi), denom));
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
      load8(g + i, gv);
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

// ---- AdamW over several slices ----

constexpr int kMaxAdamWSegments = 40;  // 80 bytes each: 3.2 KiB of parameters

struct AdamWSegment {
  float *p, *m, *v;
  const void* g;
  void* c;  // the compute copy, or null
  int64_t n;
  int first_block, blocks;
  float step_size, decay;
  int gdtype, cdtype;  // static_cast<int>(DType); cdtype -1 without a compute copy
  bool vec;            // n % 8 == 0 and every pointer 16-byte aligned
};

struct AdamWBatch {
  int count;
  AdamWSegment seg[kMaxAdamWSegments];
};

struct NoCompute {};

// One slice: the step_kernel loop with AdamW, C the compute copy's type (NoCompute: none).
template <typename G, typename C>
__device__ __forceinline__ void adamw_segment(const AdamWSegment& s, const AdamW& step,
                                              int64_t first, int64_t stride) {
  const G* g = static_cast<const G*>(s.g);
  if (s.vec) {
    for (int64_t i = first * 8; i < s.n; i += stride * 8) {
      float gv[8], pv[8];
      load8(g + i, gv);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t j = i + 4 * h;
        Pack128<float> pp = load128(s.p + j), a = load128(s.m + j), b = load128(s.v + j);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          step(pp.v[k], a.v[k], b.v[k], gv[4 * h + k]);
          pv[4 * h + k] = pp.v[k];
        }
        store128(s.p + j, pp);
        store128(s.m + j, a);
        store128(s.v + j, b);
      }
      if constexpr (!std::is_same_v<C, NoCompute>) {
        Pack128<C> cp;
#pragma unroll
        for (int k = 0; k < 8; ++k) cp.set(k, pv[k]);
        store128(static_cast<C*>(s.c) + i, cp);
      }
    }
  } else {
    for (int64_t i = first; i < s.n; i += stride) {
      float pi = s.p[i], a = s.m[i], b = s.v[i];
      step(pi, a, b, ld(g + i));
      s.p[i] = pi;
      s.m[i] = a;
      s.v[i] = b;
      if constexpr (!std::is_same_v<C, NoCompute>) st(static_cast<C*>(s.c) + i, pi);
    }
  }
}

__global__ void adamw_list_kernel(const __grid_constant__ AdamWBatch b, float beta1, float beta2,
                                  float eps, float bc2_sqrt) {
  const AdamWSegment& s = segment_of(b, static_cast<int>(blockIdx.x));
  AdamW step{};
  step.beta1 = beta1, step.beta2 = beta2, step.eps = eps;
  step.step_size = s.step_size, step.bc2_sqrt = bc2_sqrt, step.decay = s.decay;
  const int64_t stride = segment_stride(s), first = segment_first(s);
  with_float_type(s.gdtype, [&](auto gtag) {
    using G = decltype(gtag);
    if (s.cdtype == static_cast<int>(DType::bf16)) {
      adamw_segment<G, bf16_t>(s, step, first, stride);
    } else if (s.cdtype == static_cast<int>(DType::f16)) {
      adamw_segment<G, f16_t>(s, step, first, stride);
    } else {
      adamw_segment<G, NoCompute>(s, step, first, stride);
    }
  });
}

// The single step's checks, for one slice of the list.
void check_adamw(const char* op, const AdamWSlice& s) {
  check_cuda(op, {s.param, s.grad, s.m, s.v, s.compute});
  check_dtype(op, "param", *s.param, DType::f32);
  check_float(op, "grad", *s.grad);
  check_dtype(op, "m", *s.m, DType::f32);
  check_dtype(op, "v", *s.v, DType::f32);
  const int64_t n = s.param->numel();
  check_numel(op, "grad", *s.grad, n);
  check_numel(op, "m", *s.m, n);
  check_numel(op, "v", *s.v, n);
  if (s.compute) {
    check_numel(op, "compute", *s.compute, n);
    BRAID_CHECK(s.compute->dtype() == DType::bf16 || s.compute->dtype() == DType::f16, op,
                ": compute must be bf16 or f16, got ", dtype_name(s.compute->dtype()));
  }
}

}  // namespace

void adamw_step(const std::vector<AdamWSlice>& slices, float beta1, float beta2, float eps,
                int64_t t) {
  const char* op = "adamw_step";
  BRAID_CHECK(t >= 1, op, ": step t must be >= 1 (1-based), got ", t);
  // the host constants of the CPU kernel, bit for bit
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  AdamWBatch batch{};
  int blocks = 0;
  auto launch = [&] {
    if (batch.count == 0) return;
    adamw_list_kernel<<<blocks, kThreads, 0, stream()>>>(batch, beta1, beta2, eps, bc2_sqrt);
    BRAID_CUDA_LAUNCHED(op);
    batch.count = 0;
    blocks = 0;
  };
  for (const AdamWSlice& s : slices) {
    check_adamw(op, s);
    const int64_t n = s.param->numel();
    if (n == 0) continue;
    if (batch.count == kMaxAdamWSegments) launch();
    AdamWSegment& g = batch.seg[batch.count++];
    g.p = ptr<float>(*s.param), g.m = ptr<float>(*s.m), g.v = ptr<float>(*s.v);
    g.g = s.grad->device_data();
    g.c = s.compute ? s.compute->device_data() : nullptr;
    g.n = n;
    g.vec = packable<bf16_t>(n, {g.p, g.m, g.v, g.g, g.c});  // a null c is aligned
    g.first_block = blocks;
    g.blocks = static_cast<int>(grid_for(g.vec ? n / 8 : n, kThreads));
    g.step_size = static_cast<float>(s.lr / bc1);
    g.decay = 1.0f - s.lr * s.weight_decay;
    g.gdtype = static_cast<int>(s.grad->dtype());
    g.cdtype = s.compute ? static_cast<int>(s.compute->dtype()) : -1;
    blocks += g.blocks;
  }
  launch();
}

// One slice is a list of one: the single step and the list run the same kernel, so they give the
// same bits by construction.
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1,
                float beta2, float eps, float weight_decay, int64_t t) {
  const std::vector<AdamWSlice> one{AdamWSlice{&param, &grad, &m, &v, nullptr, lr, weight_decay}};
  cuda::adamw_step(one, beta1, beta2, eps, t);  // qualified: ops.h has the same by ADL
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
