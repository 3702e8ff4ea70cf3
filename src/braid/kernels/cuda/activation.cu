// Element-wise activations on the GPU (contract: kernels/ops.h, cpu/activation.cpp): GELU (tanh
// approximation) and SwiGLU, forward and accumulating backward. Grid-stride loops over 128-bit
// packs when every pointer is aligned and the size a multiple of the pack, else over elements.
#include "braid/kernels/checks.h"
#include "braid/kernels/cuda/common.cuh"
#include "braid/kernels/cuda/cuda_ops.h"

namespace braid::kernels::cuda {

namespace {

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluC = 0.044715f;
constexpr int kBlock = 256;

__device__ __forceinline__ float gelu_f(float v) {
  const float u = kGeluK * (v + kGeluC * v * v * v);
  return 0.5f * v * (1.0f + tanhf(u));
}
__device__ __forceinline__ float gelu_grad(float v) {
  const float u = kGeluK * (v + kGeluC * v * v * v);
  const float th = tanhf(u);
  const float sech2 = 1.0f - th * th;
  return 0.5f * (1.0f + th) + 0.5f * v * sech2 * kGeluK * (1.0f + 3.0f * kGeluC * v * v);
}
__device__ __forceinline__ float sigmoid_f(float x) {
  return 1.0f / (1.0f + expf(-x));
}

// Grid-stride over n / P groups of P elements.
#define BRAID_FOR_PACKS(i, n, P)                                                                 \
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * (P); i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x * (P))

template <typename T, int P>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t n) {
  BRAID_FOR_PACKS(i, n, P) {
    float v[P];
    load_vec<T, P>(inp + i, v);
#pragma unroll
    for (int j = 0; j < P; ++j) v[j] = gelu_f(v[j]);
    store_vec<T, P>(out + i, v);
  }
}

template <typename T, int P>
__global__ void gelu_backward_kernel(T* dinp, const T* dout, const T* inp, int64_t n,
                                     bool accumulate) {
  BRAID_FOR_PACKS(i, n, P) {
    float x[P], g[P], d[P];
    load_vec<T, P>(inp + i, x);
    load_vec<T, P>(dout + i, g);
    if (accumulate) {
      load_vec<T, P>(dinp + i, d);
    } else {
#pragma unroll
      for (int j = 0; j < P; ++j) d[j] = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < P; ++j) d[j] = d[j] + gelu_grad(x[j]) * g[j];
    store_vec<T, P>(dinp + i, d);
  }
}

template <typename T, int P>
__global__ void swiglu_forward_kernel(T* out, const T* gate, const T* up, int64_t n) {
  BRAID_FOR_PACKS(i, n, P) {
    float g[P], u[P];
    load_vec<T, P>(gate + i, g);
    load_vec<T, P>(up + i, u);
#pragma unroll
    for (int j = 0; j < P; ++j) g[j] = g[j] * sigmoid_f(g[j]) * u[j];
    store_vec<T, P>(out + i, g);
  }
}

// dgate += dout * up * silu'(g), dup += dout * silu(g); either may be null.
template <typename T, int P>
__global__ void swiglu_backward_kernel(T* dgate, T* dup, const T* dout, const T* gate, const T* up,
                                       int64_t n) {
  BRAID_FOR_PACKS(i, n, P) {
    float g[P], d[P];
    load_vec<T, P>(gate + i, g);
    load_vec<T, P>(dout + i, d);
    if (dgate) {
      float u[P], dg[P];
      load_vec<T, P>(up + i, u);
      load_vec<T, P>(dgate + i, dg);
#pragma unroll
      for (int j = 0; j < P; ++j) {
        const float s = sigmoid_f(g[j]);
        dg[j] = dg[j] + d[j] * u[j] * s * (1.0f + g[j] * (1.0f - s));
      }
      store_vec<T, P>(dgate + i, dg);
    }
    if (dup) {
      float du[P];
      load_vec<T, P>(dup + i, du);
#pragma unroll
      for (int j = 0; j < P; ++j) du[j] = du[j] + d[j] * g[j] * sigmoid_f(g[j]);
      store_vec<T, P>(dup + i, du);
    }
  }
}

#undef BRAID_FOR_PACKS

void check_same(const char* op, const char* name, const Tensor& t, const char* ref_name,
                const Tensor& ref) {
  cpu::check_same_dtype(op, name, t, ref_name, ref);
  BRAID_CHECK(t.numel() == ref.numel(), op, ": ", name, " has shape ", t.shape().str(), " but ",
              ref_name, " has shape ", ref.shape().str());
}

// Launches kernel<T, P> with the packed P when `ptrs` allow it, else P = 1.
template <typename T, typename Launch>
void launch_packed(const char* op, int64_t n, std::initializer_list<const void*> ptrs,
                   Launch&& launch) {
  if (n == 0) return;
  constexpr int P = Pack128<T>::size;
  if (packable<T>(n, ptrs)) {
    launch(std::integral_constant<int, P>{}, grid_for(n / P, kBlock));
  } else {
    launch(std::integral_constant<int, 1>{}, grid_for(n, kBlock));
  }
  BRAID_CUDA_LAUNCHED(op);
}

}  // namespace

void gelu_forward(Tensor& out, const Tensor& inp) {
  const char* op = "gelu_forward";
  check_cuda(op, {&out, &inp});
  cpu::check_float(op, "inp", inp);
  check_same(op, "out", out, "inp", inp);
  const int64_t n = inp.numel();
  dispatch_float(inp.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* o = ptr<T>(out);
    const T* x = ptr<T>(inp);
    launch_packed<T>(op, n, {o, x}, [&](auto p, unsigned grid) {
      gelu_forward_kernel<T, decltype(p)::value><<<grid, kBlock, 0, stream()>>>(o, x, n);
    });
  });
}

void gelu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate) {
  const char* op = "gelu_backward";
  check_cuda(op, {&dinp, &dout, &inp});
  cpu::check_float(op, "inp", inp);
  check_same(op, "dout", dout, "inp", inp);
  check_same(op, "dinp", dinp, "inp", inp);
  const int64_t n = inp.numel();
  dispatch_float(inp.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* d = ptr<T>(dinp);
    const T* g = ptr<T>(dout);
    const T* x = ptr<T>(inp);
    launch_packed<T>(op, n, {d, g, x}, [&](auto p, unsigned grid) {
      gelu_backward_kernel<T, decltype(p)::value>
          <<<grid, kBlock, 0, stream()>>>(d, g, x, n, accumulate);
    });
  });
}

void swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up) {
  const char* op = "swiglu_forward";
  check_cuda(op, {&out, &gate, &up});
  cpu::check_float(op, "gate", gate);
  check_same(op, "up", up, "gate", gate);
  check_same(op, "out", out, "gate", gate);
  const int64_t n = gate.numel();
  dispatch_float(gate.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* o = ptr<T>(out);
    const T* g = ptr<T>(gate);
    const T* u = ptr<T>(up);
    launch_packed<T>(op, n, {o, g, u}, [&](auto p, unsigned grid) {
      swiglu_forward_kernel<T, decltype(p)::value><<<grid, kBlock, 0, stream()>>>(o, g, u, n);
    });
  });
}

void swiglu_backward(Tensor* dgate, Tensor* dup, const Tensor& dout, const Tensor& gate,
                     const Tensor& up) {
  const char* op = "swiglu_backward";
  check_cuda(op, {dgate, dup, &dout, &gate, &up});
  cpu::check_float(op, "gate", gate);
  check_same(op, "up", up, "gate", gate);
  check_same(op, "dout", dout, "gate", gate);
  if (dgate) check_same(op, "dgate", *dgate, "gate", gate);
  if (dup) check_same(op, "dup", *dup, "gate", gate);
  if (!dgate && !dup) return;
  const int64_t n = gate.numel();
  dispatch_float(gate.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* dg = dgate ? ptr<T>(*dgate) : nullptr;
    T* du = dup ? ptr<T>(*dup) : nullptr;
    const T* d = ptr<T>(dout);
    const T* g = ptr<T>(gate);
    const T* u = ptr<T>(up);
    launch_packed<T>(op, n, {dg, du, d, g, u}, [&](auto p, unsigned grid) {
      swiglu_backward_kernel<T, decltype(p)::value>
          <<<grid, kBlock, 0, stream()>>>(dg, du, d, g, u, n);
    });
  });
}

}  // namespace braid::kernels::cuda
