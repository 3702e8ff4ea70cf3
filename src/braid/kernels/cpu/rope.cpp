// Rotary position embedding, HF LLaMA convention (rotate_half over the two halves of a head).
//   x[B,T,NH,HS] (HS even), half = HS/2, inv_freq[i] = 1 / theta^(2i/HS) (f32, as HF computes
//   it), angle = float(p_t) * inv_freq[i] with p_t = pos0 + t or positions[t] (i32 [T]); both
//   forms go through one table builder, so equal positions give bit-identical rows:
//   out[i]      = x[i] cos - x[i+half] sin
//   out[i+half] = x[i+half] cos + x[i] sin          (out may alias x)
//   backward (transpose rotation): dx[i] += dout[i] cos + dout[i+half] sin,
//                                  dx[i+half] += dout[i+half] cos - dout[i] sin
#include <cmath>

#include "braid/kernels/cpu/common.h"
#include "braid/kernels/device.h"
#include "braid/kernels/ops.h"

namespace braid::kernels {

using namespace cpu;

namespace {

struct RopeDims {
  int64_t B, T, NH, HS;
};

RopeDims check_rope(const char* op, const char* name, const Tensor& x, int64_t pos0) {
  check_float(op, name, x);
  BRAID_CHECK(x.dim() == 4, op, ": ", name, " must be [B,T,NH,HS], got ", x.shape().str());
  BRAID_CHECK(x.size(3) % 2 == 0, op, ": head size HS=", x.size(3), " must be even");
  BRAID_CHECK(pos0 >= 0, op, ": pos0 must be >= 0, got ", pos0);
  return {x.size(0), x.size(1), x.size(2), x.size(3)};
}

// Row t's position: pos0 + t, or positions[t] when positions is given.
struct RopePositions {
  int64_t pos0 = 0;
  const int32_t* positions = nullptr;
  int64_t at(int64_t t) const { return positions ? positions[t] : pos0 + t; }
};

RopePositions check_positions(const char* op, const Tensor& positions, int64_t T) {
  check_dtype(op, "positions", positions, DType::i32);
  check_shape(op, "positions", positions, Shape{T});
  const int32_t* p = positions.data<int32_t>();
  for (int64_t t = 0; t < T; ++t)
    BRAID_CHECK(p[t] >= 0, op, ": positions[", t, "] must be >= 0, got ", p[t]);
  return {0, p};
}

// cos/sin tables [T, half] in the calling thread's scratch (slot 1).
void rope_tables(float** cs, float** sn, int64_t T, int64_t HS, float theta,
                 const RopePositions& pos) {
  int64_t half = HS / 2;
  float* buf = scratch(1, 2 * T * half + half);
  float* inv_freq = buf + 2 * T * half;
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(HS));
  *cs = buf;
  *sn = buf + T * half;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      float a = static_cast<float>(pos.at(t)) * inv_freq[i];
      (*cs)[t * half + i] = std::cos(a);
      (*sn)[t * half + i] = std::sin(a);
    }
  }
}

// sign = +1 forward rotation, -1 transposed rotation; accumulate adds into out. Each (b, t)
// row of NH heads goes through f32 row buffers for bf16/f16 (Note [Blocked loops]); out may
// alias x (a row is read whole before it is written).
template <typename T>
void rotate(T* out, const T* x, const float* cs, const float* sn, const RopeDims& d, float sign,
            bool accumulate) {
  const int64_t half = d.HS / 2, W = d.NH * d.HS;
  const TeamScratch<float> row_s(0, 2 * W);
#pragma omp parallel
  {
    float* xbuf = row_s.mine();
    float* obuf = xbuf + W;
#pragma omp for schedule(static)
    for (int64_t bt = 0; bt < d.B * d.T; ++bt) {
      int64_t t = bt % d.T;
      const float* c = cs + t * half;
      const float* s = sn + t * half;
      const auto xrow = f32_in(x + bt * W, W, xbuf);
      float* orow = accumulate ? f32_inout(out + bt * W, W, obuf) : f32_out(out + bt * W, obuf);
      for (int64_t h = 0; h < d.NH; ++h) {
        const auto xr = xrow + h * d.HS;
        float* o = orow + h * d.HS;
        for (int64_t i = 0; i < half; ++i) {
          float x1 = xr[i], x2 = xr[i + half];
          float o1 = x1 * c[i] - sign * x2 * s[i];
          float o2 = x2 * c[i] + sign * x1 * s[i];
          if (accumulate) {
            o1 += o[i];
            o2 += o[i + half];
          }
          o[i] = o1;
          o[i + half] = o2;
        }
      }
      commit(out + bt * W, orow, W);
    }
  }
}

void forward(Tensor& out, const Tensor& x, float theta, const RopePositions& pos, const RopeDims& d,
             const char* op) {
  check_same_dtype(op, "out", out, "x", x);
  check_shape(op, "out", out, x.shape());
  float *cs, *sn;
  rope_tables(&cs, &sn, d.T, d.HS, theta, pos);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    rotate<T>(out.data<T>(), x.data<T>(), cs, sn, d, 1.0f, false);
  });
}

void backward(Tensor& dx, const Tensor& dout, float theta, const RopePositions& pos,
              const RopeDims& d, const char* op) {
  check_same_dtype(op, "dx", dx, "dout", dout);
  check_shape(op, "dx", dx, dout.shape());
  BRAID_CHECK(!(dx.shares_storage(dout) && dx.offset() == dout.offset()), op,
              ": dx must not alias dout (the backward accumulates into dx)");
  float *cs, *sn;
  rope_tables(&cs, &sn, d.T, d.HS, theta, pos);
  dispatch_float(dout.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    rotate<T>(dx.data<T>(), dout.data<T>(), cs, sn, d, -1.0f, true);
  });
}

}  // namespace

void rope_forward(Tensor& out, const Tensor& x, float theta, int64_t pos0) {
  BRAID_DEVICE_DISPATCH(rope_forward, (out, x, theta, pos0), &out, &x);
  const char* op = "rope_forward";
  check_cpu(op, {&out, &x});
  const RopeDims d = check_rope(op, "x", x, pos0);
  forward(out, x, theta, RopePositions{pos0}, d, op);
}

void rope_forward(Tensor& out, const Tensor& x, float theta, const Tensor& positions) {
  BRAID_DEVICE_DISPATCH(rope_forward_at, (out, x, theta, positions), &out, &x, &positions);
  const char* op = "rope_forward";
  check_cpu(op, {&out, &x, &positions});
  const RopeDims d = check_rope(op, "x", x, 0);
  forward(out, x, theta, check_positions(op, positions, d.T), d, op);
}

void rope_backward(Tensor& dx, const Tensor& dout, float theta, int64_t pos0) {
  BRAID_DEVICE_DISPATCH(rope_backward, (dx, dout, theta, pos0), &dx, &dout);
  const char* op = "rope_backward";
  check_cpu(op, {&dx, &dout});
  const RopeDims d = check_rope(op, "dout", dout, pos0);
  backward(dx, dout, theta, RopePositions{pos0}, d, op);
}

void rope_backward(Tensor& dx, const Tensor& dout, float theta, const Tensor& positions) {
  BRAID_DEVICE_DISPATCH(rope_backward_at, (dx, dout, theta, positions), &dx, &dout, &positions);
  const char* op = "rope_backward";
  check_cpu(op, {&dx, &dout, &positions});
  const RopeDims d = check_rope(op, "dout", dout, 0);
  backward(dx, dout, theta, check_positions(op, positions, d.T), d, op);
}

}  // namespace braid::kernels
