// Rotary position embedding on the GPU, HF LLaMA convention (contract: kernels/ops.h,
// cpu/rope.cpp). inv_freq is computed on the host exactly as the CPU computes it (f32 std::pow)
// and passed by value in the kernel's parameters, so angle = float(p_t) * inv_freq[i] is the
// CPU's angle bit for bit; cos/sin come from the device's (non-fast-math) sincosf. One thread
// per rotated pair (x[i], x[i+half]) of a head: it reads both before writing, so out may alias x.
// A positions tensor is copied to the host to be validated (>= 0) with the CPU's message.
#include <cmath>
#include <vector>

#include "braid/kernels/checks.h"
#include "braid/kernels/cuda/common.cuh"
#include "braid/kernels/cuda/cuda_ops.h"

namespace braid::kernels::cuda {

namespace {

constexpr int kBlock = 256;
constexpr int kMaxHalf = 512;  // head sizes up to 1024

struct RopeDims {
  int64_t B, T, NH, HS;
};

struct InvFreq {
  float v[kMaxHalf];
};

// sign = +1 forward rotation, -1 transposed rotation; accumulate adds into out.
template <typename T>
__global__ void rope_kernel(T* out, const T* x, InvFreq inv_freq, const int32_t* positions,
                            int64_t pos0, int64_t B, int64_t T_, int64_t NH, int64_t HS, float sign,
                            bool accumulate) {
  const int64_t half = HS / 2;
  const int64_t total = B * T_ * NH * half;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx % half;
    const int64_t bth = idx / half;  // (b * T + t) * NH + h
    const int64_t t = (bth / NH) % T_;
    const int64_t p = positions ? static_cast<int64_t>(positions[t]) : pos0 + t;
    const float a = static_cast<float>(p) * inv_freq.v[i];
    float s, c;
    sincosf(a, &s, &c);
    const int64_t base = bth * HS;  // row b*T+t has NH*HS elements: head h starts at bth*HS
    const float x1 = ld(x + base + i), x2 = ld(x + base + i + half);
    float o1 = x1 * c - sign * x2 * s;
    float o2 = x2 * c + sign * x1 * s;
    if (accumulate) {
      o1 += ld(out + base + i);
      o2 += ld(out + base + i + half);
    }
    st(out + base + i, o1);
    st(out + base + i + half, o2);
  }
}

RopeDims check_rope(const char* op, const char* name, const Tensor& x, int64_t pos0) {
  cpu::check_float(op, name, x);
  BRAID_CHECK(x.dim() == 4, op, ": ", name, " must be [B,T,NH,HS], got ", x.shape().str());
  BRAID_CHECK(x.size(3) % 2 == 0, op, ": head size HS=", x.size(3), " must be even");
  BRAID_CHECK(pos0 >= 0, op, ": pos0 must be >= 0, got ", pos0);
  BRAID_CHECK(x.size(3) / 2 <= kMaxHalf, op, ": head size HS=", x.size(3),
              " exceeds the CUDA kernel's maximum ", 2 * kMaxHalf);
  return {x.size(0), x.size(1), x.size(2), x.size(3)};
}

// Checks positions (i32 [T], every entry >= 0, validated on the host) and returns its pointer.
const int32_t* check_positions(const char* op, const Tensor& positions, int64_t T) {
  cpu::check_dtype(op, "positions", positions, DType::i32);
  cpu::check_shape(op, "positions", positions, Shape{T});
  const int32_t* dp = ptr<int32_t>(positions);
  std::vector<int32_t> p(static_cast<size_t>(T));
  if (T > 0) copy_to_host(p.data(), dp, p.size() * sizeof(int32_t));
  for (int64_t t = 0; t < T; ++t)
    BRAID_CHECK(p[t] >= 0, op, ": positions[", t, "] must be >= 0, got ", p[t]);
  return dp;
}

// As cpu/rope.cpp's rope_tables computes it.
InvFreq inv_freq_of(int64_t HS, float theta) {
  InvFreq f{};
  for (int64_t i = 0; i < HS / 2; ++i)
    f.v[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(HS));
  return f;
}

void launch(const char* op, Tensor& out, const Tensor& x, float theta, const int32_t* positions,
            int64_t pos0, const RopeDims& d, float sign, bool accumulate) {
  const int64_t total = d.B * d.T * d.NH * (d.HS / 2);
  if (total == 0) return;
  const InvFreq f = inv_freq_of(d.HS, theta);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    rope_kernel<T><<<grid_for(total, kBlock), kBlock, 0, stream()>>>(
        ptr<T>(out), ptr<T>(x), f, positions, pos0, d.B, d.T, d.NH, d.HS, sign, accumulate);
    BRAID_CUDA_LAUNCHED(op);
  });
}

void forward(const char* op, Tensor& out, const Tensor& x, float theta, const int32_t* positions,
             int64_t pos0, const RopeDims& d) {
  cpu::check_same_dtype(op, "out", out, "x", x);
  cpu::check_shape(op, "out", out, x.shape());
  launch(op, out, x, theta, positions, pos0, d, 1.0f, false);
}

void backward(const char* op, Tensor& dx, const Tensor& dout, float theta, const int32_t* positions,
              int64_t pos0, const RopeDims& d) {
  cpu::check_same_dtype(op, "dx", dx, "dout", dout);
  cpu::check_shape(op, "dx", dx, dout.shape());
  BRAID_CHECK(!(dx.shares_storage(dout) && dx.offset() == dout.offset()), op,
              ": dx must not alias dout (the backward accumulates into dx)");
  launch(op, dx, dout, theta, positions, pos0, d, -1.0f, true);
}

}  // namespace

void rope_forward(Tensor& out, const Tensor& x, float theta, int64_t pos0) {
  const char* op = "rope_forward";
  check_cuda(op, {&out, &x});
  const RopeDims d = check_rope(op, "x", x, pos0);
  forward(op, out, x, theta, nullptr, pos0, d);
}

void rope_forward(Tensor& out, const Tensor& x, float theta, const Tensor& positions) {
  const char* op = "rope_forward";
  check_cuda(op, {&out, &x, &positions});
  const RopeDims d = check_rope(op, "x", x, 0);
  forward(op, out, x, theta, check_positions(op, positions, d.T), 0, d);
}

void rope_backward(Tensor& dx, const Tensor& dout, float theta, int64_t pos0) {
  const char* op = "rope_backward";
  check_cuda(op, {&dx, &dout});
  const RopeDims d = check_rope(op, "dout", dout, pos0);
  backward(op, dx, dout, theta, nullptr, pos0, d);
}

void rope_backward(Tensor& dx, const Tensor& dout, float theta, const Tensor& positions) {
  const char* op = "rope_backward";
  check_cuda(op, {&dx, &dout, &positions});
  const RopeDims d = check_rope(op, "dout", dout, 0);
  backward(op, dx, dout, theta, check_positions(op, positions, d.T), 0, d);
}

}  // namespace braid::kernels::cuda
