// Element-wise activations (any shape; gate/up/out share one shape).
//   gelu (tanh approximation): out = 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2/pi)
//   swiglu: out[N,H] = silu(gate) * up, silu(g) = g * sigmoid(g)
// Backward accumulates: dinp += dout * gelu'(x); dgate += dout * up * silu'(g);
// dup += dout * silu(g).
#include "braid/kernels/cpu/common.h"
#include "braid/kernels/ops.h"

namespace braid::kernels {

using namespace cpu;

namespace {

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluC = 0.044715f;

void check_same(const char* op, const char* name, const Tensor& t, const char* ref_name,
                const Tensor& ref) {
  check_same_dtype(op, name, t, ref_name, ref);
  BRAID_CHECK(t.numel() == ref.numel(), op, ": ", name, " has shape ", t.shape().str(), " but ",
              ref_name, " has shape ", ref.shape().str());
}

inline float sigmoid(float x) {
  return 1.0f / (1.0f + fast_exp(-x));
}

}  // namespace

void gelu_forward(Tensor& out, const Tensor& inp) {
  const char* op = "gelu_forward";
  check_cpu(op, {&out, &inp});
  check_float(op, "inp", inp);
  check_same(op, "out", out, "inp", inp);
  int64_t n = inp.numel();
  dispatch_float(inp.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* x = inp.data<T>();
    T* o = out.data<T>();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      float v = ld(&x[i]);
      float u = kGeluK * (v + kGeluC * v * v * v);
      st(&o[i], 0.5f * v * (1.0f + fast_tanh(u)));
    }
  });
}

void gelu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp) {
  const char* op = "gelu_backward";
  check_cpu(op, {&dinp, &dout, &inp});
  check_float(op, "inp", inp);
  check_same(op, "dout", dout, "inp", inp);
  check_same(op, "dinp", dinp, "inp", inp);
  int64_t n = inp.numel();
  dispatch_float(inp.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* x = inp.data<T>();
    const T* g = dout.data<T>();
    T* d = dinp.data<T>();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      float v = ld(&x[i]);
      float u = kGeluK * (v + kGeluC * v * v * v);
      float th = fast_tanh(u);
      float sech2 = 1.0f - th * th;
      float grad = 0.5f * (1.0f + th) + 0.5f * v * sech2 * kGeluK * (1.0f + 3.0f * kGeluC * v * v);
      st(&d[i], ld(&d[i]) + grad * ld(&g[i]));
    }
  });
}

void swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up) {
  const char* op = "swiglu_forward";
  check_cpu(op, {&out, &gate, &up});
  check_float(op, "gate", gate);
  check_same(op, "up", up, "gate", gate);
  check_same(op, "out", out, "gate", gate);
  int64_t n = gate.numel();
  dispatch_float(gate.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* g = gate.data<T>();
    const T* u = up.data<T>();
    T* o = out.data<T>();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      float gv = ld(&g[i]);
      st(&o[i], gv * sigmoid(gv) * ld(&u[i]));
    }
  });
}

void swiglu_backward(Tensor* dgate, Tensor* dup, const Tensor& dout, const Tensor& gate,
                     const Tensor& up) {
  const char* op = "swiglu_backward";
  check_cpu(op, {dgate, dup, &dout, &gate, &up});
  check_float(op, "gate", gate);
  check_same(op, "up", up, "gate", gate);
  check_same(op, "dout", dout, "gate", gate);
  if (dgate) check_same(op, "dgate", *dgate, "gate", gate);
  if (dup) check_same(op, "dup", *dup, "gate", gate);
  int64_t n = gate.numel();
  dispatch_float(gate.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* g = gate.data<T>();
    const T* u = up.data<T>();
    const T* d = dout.data<T>();
    T* dg = dgate ? dgate->data<T>() : nullptr;
    T* du = dup ? dup->data<T>() : nullptr;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      float gv = ld(&g[i]), dv = ld(&d[i]), s = sigmoid(gv);
      if (dg) st(&dg[i], ld(&dg[i]) + dv * ld(&u[i]) * s * (1.0f + gv * (1.0f - s)));
      if (du) st(&du[i], ld(&du[i]) + dv * gv * s);
    }
  });
}

}  // namespace braid::kernels
