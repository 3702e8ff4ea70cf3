// Element-wise activations (any shape; gate/up/out share one shape).
//   gelu (tanh approximation): out = 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2/pi)
//   swiglu: out[N,H] = silu(gate) * up, silu(g) = g * sigmoid(g)
// Backward accumulates: dinp += dout * gelu'(x); dgate += dout * up * silu'(g);
// dup += dout * silu(g).
#include <algorithm>

#include "braid/kernels/cpu/common.h"
#include "braid/kernels/device.h"
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
  BRAID_DEVICE_DISPATCH(gelu_forward, (out, inp), &out, &inp);
  const char* op = "gelu_forward";
  check_cpu(op, {&out, &inp});
  check_float(op, "inp", inp);
  check_same(op, "out", out, "inp", inp);
  int64_t n = inp.numel();
  dispatch_float(inp.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* x = inp.data<T>();
    T* o = out.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t i0 = 0; i0 < n; i0 += kBlock) {  // Note [Blocked loops]
      const int64_t m = std::min(kBlock, n - i0);
      float xb[kBlock], ob[kBlock];
      const auto xv = f32_in(x + i0, m, xb);
      float* ov = f32_out(o + i0, ob);
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) {
        float v = xv[i];
        float u = kGeluK * (v + kGeluC * v * v * v);
        ov[i] = 0.5f * v * (1.0f + fast_tanh(u));
      }
      commit(o + i0, ov, m);
    }
  });
}

void gelu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate) {
  BRAID_DEVICE_DISPATCH(gelu_backward, (dinp, dout, inp, accumulate), &dinp, &dout, &inp);
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
#pragma omp parallel for schedule(static)
    for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
      const int64_t m = std::min(kBlock, n - i0);
      float xb[kBlock], gb[kBlock], db[kBlock];
      const auto xv = f32_in(x + i0, m, xb);
      const auto gv = f32_in(g + i0, m, gb);
      // Setting: the block starts from zeros in L1 (the loop below stays the one loop, which a
      // select inside it kept from vectorising: 8x slower).
      float* dv = accumulate ? f32_inout(d + i0, m, db) : f32_out(d + i0, db);
      if (!accumulate) std::fill_n(dv, m, 0.0f);
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) {
        float v = xv[i];
        float u = kGeluK * (v + kGeluC * v * v * v);
        float th = fast_tanh(u);
        float sech2 = 1.0f - th * th;
        float grad =
            0.5f * (1.0f + th) + 0.5f * v * sech2 * kGeluK * (1.0f + 3.0f * kGeluC * v * v);
        dv[i] = dv[i] + grad * gv[i];
      }
      commit(d + i0, dv, m);
    }
  });
}

void swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up) {
  BRAID_DEVICE_DISPATCH(swiglu_forward, (out, gate, up), &out, &gate, &up);
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
#pragma omp parallel for schedule(static)
    for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
      const int64_t m = std::min(kBlock, n - i0);
      float gb[kBlock], ub[kBlock], ob[kBlock];
      const auto gv = f32_in(g + i0, m, gb);
      const auto uv = f32_in(u + i0, m, ub);
      float* ov = f32_out(o + i0, ob);
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) ov[i] = gv[i] * sigmoid(gv[i]) * uv[i];
      commit(o + i0, ov, m);
    }
  });
}

void swiglu_backward(Tensor* dgate, Tensor* dup, const Tensor& dout, const Tensor& gate,
                     const Tensor& up) {
  BRAID_DEVICE_DISPATCH(swiglu_backward, (dgate, dup, dout, gate, up), dgate, dup, &dout, &gate,
                        &up);
  const char* op = "swiglu_backward";
  check_cpu(op, {dgate, dup, &dout, &gate, &up});
  check_float(op, "gate", gate);
  check_same(op, "up", up, "gate", gate);
  check_same(op, "dout", dout, "gate", gate);
  if (dgate) check_same(op, "dgate", *dgate, "gate", gate);
  if (dup) check_same(op, "dup", *dup, "gate", gate);
  if (!dgate && !dup) return;
  int64_t n = gate.numel();
  dispatch_float(gate.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* g = gate.data<T>();
    const T* u = up.data<T>();
    const T* d = dout.data<T>();
    T* dg = dgate ? dgate->data<T>() : nullptr;
    T* du = dup ? dup->data<T>() : nullptr;
#pragma omp parallel for schedule(static)
    for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
      const int64_t m = std::min(kBlock, n - i0);
      float gb[kBlock], db[kBlock], ub[kBlock], dgb[kBlock], dub[kBlock];
      const auto gv = f32_in(g + i0, m, gb);
      const auto dv = f32_in(d + i0, m, db);
      const auto uv = f32_in(u + i0, dg ? m : 0, ub);
      float* dgv = dg ? f32_inout(dg + i0, m, dgb) : nullptr;
      float* duv = du ? f32_inout(du + i0, m, dub) : nullptr;
      if (std::is_same_v<T, float> || !dgv || !duv) {
        // The branches stay inside the loop (GCC masks them): written this way f32 keeps the
        // roundings it always had (hoisting them changes which products GCC fuses).
        for (int64_t i = 0; i < m; ++i) {
          float gi = gv[i], di = dv[i], s = sigmoid(gi);
          if (dgv) dgv[i] = dgv[i] + di * uv[i] * s * (1.0f + gi * (1.0f - s));
          if (duv) duv[i] = duv[i] + di * gi * s;
        }
      } else {  // both gradients, into f32 blocks: a branch-free loop
#pragma omp simd
        for (int64_t i = 0; i < m; ++i) {
          float gi = gv[i], di = dv[i], s = sigmoid(gi);
          dgv[i] = dgv[i] + di * uv[i] * s * (1.0f + gi * (1.0f - s));
          duv[i] = duv[i] + di * gi * s;
        }
      }
      if (dg) commit(dg + i0, dgv, m);
      if (du) commit(du + i0, duv, m);
    }
  });
}

}  // namespace braid::kernels
