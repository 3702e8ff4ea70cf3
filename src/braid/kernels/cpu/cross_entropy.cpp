// LM head fused with softmax cross-entropy, in chunks of rows: never N x V logits at once.
//   x[N,C], weight[V,C], targets[N] i32 (ignore_index rows count for nothing), lse[N] f32
//   forward, per chunk of R rows: logits[R,V] = x_r @ weight^T (GEMM into kernel scratch),
//     lse = logsumexp(logits row), loss += lse - logits[target]; returns the summed loss
//   backward, per chunk: recompute logits, dlogits = (softmax - onehot) * scale (0 for
//     ignored rows), dx_r += dlogits @ weight, dweight += dlogits^T @ x_r
//   forward_backward: both in one pass when the loss scale is known up front (saves the
//     logits recompute, a quarter of the lm-head GEMM work)
// bf16: logits accumulate in f32; dlogits are rounded to bf16 for the two backward GEMMs
// (as autocast does). f16: x and weight are widened to f32 for f32 GEMMs (Note [f16 GEMM]),
// so dlogits stay f32 (f16 would flush the small ones to zero). dweight accumulates over
// chunks in f32: straight into an f32 dweight
// (Note [Parameter gradients], ops.h), else in an f32 scratch of [V,C] added once at the end.
#include <cmath>

#include "braid/kernels/cpu/common.h"
#include "braid/kernels/cpu/gemm.h"
#include "braid/kernels/ops.h"

namespace braid::kernels {

using namespace cpu;

namespace {

constexpr int64_t kChunk = 256;  // rows per chunk: logits scratch of kChunk * V floats

struct CeDims {
  int64_t N, C, V;
};

CeDims check_ce(const char* op, const Tensor& x, const Tensor& weight, const Tensor& targets,
                int32_t ignore_index) {
  check_float(op, "x", x);
  check_same_dtype(op, "weight", weight, "x", x);
  BRAID_CHECK(weight.dim() == 2, op, ": weight must be [V,C], got ", weight.shape().str());
  CeDims d{rows_of(x), weight.size(1), weight.size(0)};
  BRAID_CHECK(cols_of(x) == d.C, op, ": x ", x.shape().str(), " has C=", cols_of(x), " but weight ",
              weight.shape().str(), " has C=", d.C);
  check_dtype(op, "targets", targets, DType::i32);
  BRAID_CHECK(targets.numel() == d.N, op, ": targets ", targets.shape().str(), " has ",
              targets.numel(), " entries for ", d.N, " rows of x ", x.shape().str());
  const int32_t* t = targets.data<int32_t>();
  for (int64_t n = 0; n < d.N; ++n) {
    BRAID_CHECK(t[n] == ignore_index || (t[n] >= 0 && t[n] < d.V), op, ": target id ", t[n],
                " at position ", n, " (flat offset in targets ", targets.shape().str(),
                ") is out of range for vocab size ", d.V, " (ignore_index ", ignore_index, ")");
  }
  return d;
}

// logits[R,V] = x[r0:r0+R] @ weight^T in f32.
template <typename T>
void chunk_logits(float* logits, const T* x, const T* w, int64_t R, const CeDims& d) {
  gemm(false, true, R, d.V, d.C, 1.0f, x, d.C, w, d.C, 0.0f, logits, d.V);
}

float row_lse(const float* z, int64_t V) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int64_t v = 0; v < V; ++v) m = std::max(m, z[v]);
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t v = 0; v < V; ++v) s += fast_exp(z[v] - m);
  return m + std::log(s);
}

// One pass over the row chunks. lse_in given: use it (backward); else compute lse (into
// lse_out) and the summed loss. dx/dweight given: accumulate the gradients of scale * loss.
// The GEMMs take G: T itself for f32 and bf16; f32 for f16, whose x rows and weight are
// widened once per pass and chunk (Note [f16 GEMM]), so f16 keeps its dlogits in f32.
template <typename T>
double ce_pass(const CeDims& d, const T* x, const T* w, const int32_t* tg, const float* lse_in,
               float* lse_out, T* dx, Tensor* dweight, float scale, int32_t ignore_index) {
  constexpr bool kWiden = std::is_same_v<T, f16>;
  using G = std::conditional_t<kWiden, float, T>;
  const bool grads = dx || dweight;
  double* row_loss = scratch_f64(1, d.N);
  float* logits = scratch(2, std::min(kChunk, d.N) * d.V);
  // dweight's GEMMs accumulate in f32 across chunks: into dweight itself when it is f32, else
  // into a zeroed scratch that is added to it at the end.
  float* dw_acc = nullptr;
  if (dweight && dweight->dtype() == DType::f32) {
    dw_acc = dweight->data<float>();
  } else if (dweight) {
    dw_acc = scratch(3, d.V * d.C);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < d.V * d.C; ++i) dw_acc[i] = 0.0f;
  }
  const G* wg;
  if constexpr (kWiden) {
    wg = widen(0, w, d.V, d.C, d.C);
  } else {
    wg = w;
  }
  for (int64_t r0 = 0; r0 < d.N; r0 += kChunk) {
    const int64_t R = std::min(kChunk, d.N - r0);
    const G* xr;
    if constexpr (kWiden) {
      xr = widen(1, x + r0 * d.C, R, d.C, d.C);
    } else {
      xr = x + r0 * d.C;
    }
    chunk_logits(logits, xr, wg, R, d);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < R; ++r) {
      float* z = logits + r * d.V;
      const int32_t t = tg[r0 + r];
      const float l = lse_in ? lse_in[r0 + r] : row_lse(z, d.V);
      if (lse_out) lse_out[r0 + r] = l;
      row_loss[r0 + r] = t == ignore_index ? 0.0 : static_cast<double>(l - z[t]);
      if (!grads) continue;
      if (t == ignore_index) {
        for (int64_t v = 0; v < d.V; ++v) z[v] = 0.0f;
        continue;
      }
#pragma omp simd
      for (int64_t v = 0; v < d.V; ++v) z[v] = fast_exp(z[v] - l) * scale;
      z[t] -= scale;
    }
    if (!grads) continue;
    // dlogits in G: rounded to bf16 (as autocast does) for bf16, else the f32 logits.
    const G* dl;
    if constexpr (std::is_same_v<G, float>) {
      dl = logits;
    } else {
      G* rounded = scratch_as<G>(4, R * d.V);
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < R; ++r) store_row(rounded + r * d.V, logits + r * d.V, d.V);
      dl = rounded;
    }
    if (dx) {
      if constexpr (std::is_same_v<T, float>) {
        gemm(false, false, R, d.C, d.V, 1.0f, dl, d.V, wg, d.C, 1.0f, dx + r0 * d.C, d.C);
      } else {
        float* tmp = scratch(5, R * d.C);
        gemm(false, false, R, d.C, d.V, 1.0f, dl, d.V, wg, d.C, 0.0f, tmp, d.C);
        T* dxr = dx + r0 * d.C;
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < R; ++r) add_row(dxr + r * d.C, tmp + r * d.C, d.C);
      }
    }
    if (dweight) gemm(true, false, d.V, d.C, R, 1.0f, dl, d.V, xr, d.C, 1.0f, dw_acc, d.C);
  }
  if (dweight && dweight->dtype() != DType::f32) {
    T* dw = dweight->data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t v = 0; v < d.V; ++v) add_row(dw + v * d.C, dw_acc + v * d.C, d.C);
  }
  double loss = 0;  // summed in row order: independent of the thread count
  for (int64_t n = 0; n < d.N; ++n) loss += row_loss[n];
  return loss;
}

int64_t count_rows(const int32_t* tg, int64_t N, int32_t ignore_index) {
  int64_t c = 0;
  for (int64_t n = 0; n < N; ++n) c += tg[n] != ignore_index;
  return c;
}

void check_grads(const char* op, const Tensor* dx, const Tensor* dweight, const Tensor& x,
                 const CeDims& d) {
  if (dx) check_same_dtype(op, "dx", *dx, "x", x), check_numel(op, "dx", *dx, d.N * d.C);
  if (dweight) {
    check_param_grad(op, "dweight", *dweight, "x", x);
    check_numel(op, "dweight", *dweight, d.V * d.C);
  }
}

}  // namespace

double lm_head_ce_forward(Tensor& lse, int64_t* count, const Tensor& x, const Tensor& weight,
                          const Tensor& targets, int32_t ignore_index) {
  return lm_head_ce_forward_backward(lse, count, nullptr, nullptr, x, weight, targets, 0.0f,
                                     ignore_index);
}

double lm_head_ce_forward_backward(Tensor& lse, int64_t* count, Tensor* dx, Tensor* dweight,
                                   const Tensor& x, const Tensor& weight, const Tensor& targets,
                                   float scale, int32_t ignore_index) {
  const char* op = dx || dweight ? "lm_head_ce_forward_backward" : "lm_head_ce_forward";
  check_cpu(op, {&lse, dx, dweight, &x, &weight, &targets});
  CeDims d = check_ce(op, x, weight, targets, ignore_index);
  check_dtype(op, "lse", lse, DType::f32);
  check_numel(op, "lse", lse, d.N);
  check_grads(op, dx, dweight, x, d);
  const int32_t* tg = targets.data<int32_t>();
  if (count) *count = count_rows(tg, d.N, ignore_index);
  return dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    return ce_pass<T>(d, x.data<T>(), weight.data<T>(), tg, nullptr, lse.data<float>(),
                      dx ? dx->data<T>() : nullptr, dweight, scale, ignore_index);
  });
}

void lm_head_ce_backward(Tensor* dx, Tensor* dweight, const Tensor& x, const Tensor& weight,
                         const Tensor& targets, const Tensor& lse, float scale,
                         int32_t ignore_index) {
  const char* op = "lm_head_ce_backward";
  check_cpu(op, {dx, dweight, &x, &weight, &targets, &lse});
  CeDims d = check_ce(op, x, weight, targets, ignore_index);
  check_dtype(op, "lse", lse, DType::f32);
  check_numel(op, "lse", lse, d.N);
  check_grads(op, dx, dweight, x, d);
  if (!dx && !dweight) return;
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    ce_pass<T>(d, x.data<T>(), weight.data<T>(), targets.data<int32_t>(), lse.data<float>(),
               nullptr, dx ? dx->data<T>() : nullptr, dweight, scale, ignore_index);
  });
}

void lm_head_logits(Tensor& logits, const Tensor& x, const Tensor& weight) {
  const char* op = "lm_head_logits";
  check_cpu(op, {&logits, &x, &weight});
  check_float(op, "x", x);
  check_same_dtype(op, "weight", weight, "x", x);
  check_dtype(op, "logits", logits, DType::f32);
  BRAID_CHECK(weight.dim() == 2 && cols_of(x) == weight.size(1), op, ": x ", x.shape().str(),
              " and weight ", weight.shape().str(), " disagree on C");
  CeDims d{rows_of(x), weight.size(1), weight.size(0)};
  BRAID_CHECK(logits.numel() == d.N * d.V && cols_of(logits) == d.V, op, ": logits has shape ",
              logits.shape().str(), ", expected [", d.N, ",", d.V, "]");
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    chunk_logits(logits.data<float>(), x.data<T>(), weight.data<T>(), d.N, d);
  });
}

}  // namespace braid::kernels
