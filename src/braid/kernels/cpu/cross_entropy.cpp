// LM head fused with softmax cross-entropy, in chunks of rows: never N x V logits at once.
//   x[N,C], weight[V,C], targets[N] i32 (ignore_index rows count for nothing), lse[N] f32
//   forward, per chunk of R rows: logits[R,V] = x_r @ weight^T (GEMM into kernel scratch),
//     lse = logsumexp(logits row), loss += lse - logits[target]; returns the summed loss
//   backward, per chunk: recompute logits, dlogits = (softmax - onehot) * scale (0 for
//     ignored rows), dx_r += dlogits @ weight, dweight += dlogits^T @ x_r
//   forward_backward: both in one pass when the loss scale is known up front (saves the
//     logits recompute, a quarter of the lm-head GEMM work)
//   partial forward / backward: the same pass on one rank's vocabulary slice (below)
// bf16: logits accumulate in f32; dlogits are rounded to bf16 for the two backward GEMMs
// (as autocast does). f16: x and weight are widened to f32 for f32 GEMMs (Note [f16 GEMM]),
// so dlogits stay f32 (f16 would flush the small ones to zero). dweight accumulates over
// chunks in f32: straight into an f32 dweight
// (Note [Parameter gradients], ops.h), else in an f32 scratch of [V,C] added once at the end.
//
// Note [Vocab-parallel cross-entropy]
// With tensor parallelism rank r holds weight rows [v0, v0+Vl) of the (padded) vocabulary,
// the first `valid` of them real. Every pass runs on such a slice, and the full-vocab ops are
// the slice v0 = 0, valid = V: the same GEMMs and loops, so the same bits as before slices
// existed. Logits, dlogits and the GEMMs cover the real columns only (logits keep row stride
// Vl), so padding never enters a max or a sum and its weight rows get no gradient.
// The partial forward hands out the row max and the sum of exp(z - max) instead of their lse,
// so that ranks combine them without overflow (ops.h gives the combine). Conventions:
// - valid == 0 (a slice of padding only): row_max = -inf, sumexp = 0, target_logit = 0, the
//   max and sum over no columns. Some rank has a real column, so M is finite and this rank's
//   term is 0 * exp(-inf - M) = 0 * 0: no NaN. Its backward adds nothing.
// - ignored rows: row_max and sumexp as for a counted row (finite), target_logit 0, and zero
//   dlogits. The combined lse is then the full-vocab lse of every row, as lm_head_ce_forward
//   stores it; the loss of an ignored row is the caller's to drop.
// - targets: the kernel sees one slice, so it checks only t >= 0 (or ignore_index); a target
//   outside the slice simply contributes no target logit here.
#include <algorithm>
#include <cmath>
#include <utility>

#include "braid/kernels/cpu/common.h"
#include "braid/kernels/cpu/gemm.h"
#include "braid/kernels/device.h"
#include "braid/kernels/ops.h"

namespace braid::kernels {

using namespace cpu;

namespace {

constexpr int64_t kChunk = kLmHeadChunk;  // rows per chunk: logits scratch of kChunk * V floats

struct CeDims {
  int64_t N, C, V;
};

// Note [Grouped weight gradient]: per 256-row chunk the weight's gradient is a GEMM with K =
// 256 that reads and writes the whole f32 [V, C] accumulator; in bf16 groups of up to 1024 rows
// (and 32 MiB of dlogits) run it a quarter as often with K four times as deep: kernels_bench's
// bf16 head (N 2048, V 8192, C 384) 109.2-110.5 -> 105.5-106.9 ms fused, backward 102.5 -> 99.0.
// f32 and f16 keep one GEMM a chunk (their dlogits are the chunk's f32 logits).

// targets in [0, V) or ignore_index; a slice (is_slice) checks only t >= 0, as the global
// vocabulary size is the caller's to check.
CeDims check_ce(const char* op, const Tensor& x, const Tensor& weight, const Tensor& targets,
                int32_t ignore_index, bool is_slice = false) {
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
    if (is_slice) {
      BRAID_CHECK(t[n] == ignore_index || t[n] >= 0, op, ": target id ", t[n], " at position ", n,
                  " (flat offset in targets ", targets.shape().str(),
                  ") is negative (ignore_index ", ignore_index, ")");
    } else {
      BRAID_CHECK(t[n] == ignore_index || (t[n] >= 0 && t[n] < d.V), op, ": target id ", t[n],
                  " at position ", n, " (flat offset in targets ", targets.shape().str(),
                  ") is out of range for vocab size ", d.V, " (ignore_index ", ignore_index, ")");
    }
  }
  return d;
}

void check_slice(const char* op, const Tensor& weight, const CeDims& d, int64_t v0, int64_t valid) {
  BRAID_CHECK(v0 >= 0, op, ": v0=", v0, " must be >= 0");
  BRAID_CHECK(valid >= 0 && valid <= d.V, op, ": valid=", valid, " is outside [0, ", d.V,
              "] (the rows of weight ", weight.shape().str(), ")");
}

// logits[R, 0:cols] = x[r0:r0+R] @ weight[0:cols]^T in f32 (logits row stride V).
template <typename T>
void chunk_logits(float* logits, const T* x, const T* w, int64_t R, int64_t cols, const CeDims& d) {
  if (cols > 0) gemm(false, true, R, cols, d.C, 1.0f, x, d.C, w, d.C, 0.0f, logits, d.V);
}

struct RowStats {
  float max, sumexp;  // -inf and 0 over no columns
};
RowStats row_stats(const float* z, int64_t V) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int64_t v = 0; v < V; ++v) m = std::max(m, z[v]);
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t v = 0; v < V; ++v) s += fast_exp(z[v] - m);
  return {m, s};
}

// What one pass over the row chunks reads and writes (null: not wanted). The weight holds
// vocabulary rows [v0, v0 + V) of which the first `valid` are real.
struct CePass {
  const int32_t* targets;
  int64_t v0, valid;
  int32_t ignore_index;
  const float* lse_in;  // backward: lse per row (the global one for a slice)
  float* lse_out;       // forward: lse over this slice's real columns
  float* max_out;       // partial forward: row max, sum of exp(z - max), target logit
  float* sumexp_out;
  float* target_out;
  Tensor* dweight;
  float scale;
};

// One pass over the row chunks. lse_in given: use it (backward); else compute the row stats
// (into lse_out, max_out, sumexp_out) and the summed loss (a slice's, of its local targets
// against its own lse, means nothing and is dropped). dx/dweight given: accumulate the
// gradients of scale * loss. The GEMMs take G: T itself for f32 and bf16; f32 for f16, whose
// x rows and weight are widened once per pass and chunk (Note [f16 GEMM]), so f16 keeps its
// dlogits in f32.
template <typename T>
double ce_pass(const CeDims& d, const T* x, const T* w, T* dx, const CePass& p) {
  constexpr bool kWiden = std::is_same_v<T, f16>;
  using G = std::conditional_t<kWiden, float, T>;
  const int64_t Vr = p.valid;  // real columns; the GEMMs and loops stop there
  Tensor* dweight = p.dweight;
  const bool grads = (dx || dweight) && Vr > 0;  // no real column: no gradient
  double* row_loss = scratch_f64(1, d.N);
  float* logits = scratch(2, std::min(kChunk, d.N) * d.V);
  // dweight's GEMMs accumulate in f32 across chunks: into dweight itself when it is f32, else
  // into a zeroed scratch that is added to it at the end.
  float* dw_acc = nullptr;
  if (dweight && dweight->dtype() == DType::f32) {
    dw_acc = dweight->data<float>();
  } else if (dweight) {
    dw_acc = scratch(3, Vr * d.C);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < Vr * d.C; ++i) dw_acc[i] = 0.0f;
  }
  const G* wg;
  if constexpr (kWiden) {
    wg = widen(0, w, Vr, d.C, d.C);
  } else {
    wg = w;
  }
  // bf16: the rounded dlogits of several chunks stay side by side and the weight's gradient
  // takes them in one GEMM (Note [Grouped weight gradient]); else one chunk at a time.
  const int64_t group = std::is_same_v<G, bf16> ? lm_head_dw_group_rows(d.V) : kChunk;
  for (int64_t r0 = 0; r0 < d.N; r0 += kChunk) {
    const int64_t R = std::min(kChunk, d.N - r0);
    const int64_t g0 = r0 / group * group;  // the group's first row
    const G* xr;
    if constexpr (kWiden) {
      xr = widen(1, x + r0 * d.C, R, d.C, d.C);
    } else {
      xr = x + r0 * d.C;
    }
    chunk_logits(logits, xr, wg, R, Vr, d);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < R; ++r) {
      const int64_t n = r0 + r;
      float* z = logits + r * d.V;
      const int32_t t = p.targets[n];
      const bool counted = t != p.ignore_index;
      const int64_t tl = static_cast<int64_t>(t) - p.v0;  // target column, if local
      const bool local = counted && tl >= 0 && tl < Vr;
      float l;
      if (p.lse_in) {
        l = p.lse_in[n];
      } else {
        const RowStats st = row_stats(z, Vr);
        l = st.max + std::log(st.sumexp);
        if (p.max_out) p.max_out[n] = st.max, p.sumexp_out[n] = st.sumexp;
      }
      if (p.lse_out) p.lse_out[n] = l;
      if (p.target_out) p.target_out[n] = local ? z[tl] : 0.0f;
      row_loss[n] = local ? static_cast<double>(l - z[tl]) : 0.0;
      if (!grads) continue;
      if (!counted) {
        for (int64_t v = 0; v < Vr; ++v) z[v] = 0.0f;
        continue;
      }
#pragma omp simd
      for (int64_t v = 0; v < Vr; ++v) z[v] = fast_exp(z[v] - l) * p.scale;
      if (local) z[tl] -= p.scale;
    }
    if (!grads) continue;
    // dlogits in G: rounded to bf16 (as autocast does) for bf16, else the f32 logits.
    const G* dl;
    if constexpr (std::is_same_v<G, float>) {
      dl = logits;
    } else {
      G* rounded = scratch_as<G>(4, std::min(group, d.N) * d.V) + (r0 - g0) * d.V;
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < R; ++r) store_row(rounded + r * d.V, logits + r * d.V, Vr);
      dl = rounded;
    }
    if (dx) {
      if constexpr (std::is_same_v<T, float>) {
        gemm(false, false, R, d.C, Vr, 1.0f, dl, d.V, wg, d.C, 1.0f, dx + r0 * d.C, d.C);
      } else {
        float* tmp = scratch(5, R * d.C);
        gemm(false, false, R, d.C, Vr, 1.0f, dl, d.V, wg, d.C, 0.0f, tmp, d.C);
        T* dxr = dx + r0 * d.C;
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < R; ++r) add_row(dxr + r * d.C, tmp + r * d.C, d.C);
      }
    }
    if (const int64_t K = lm_head_group_done(r0, R, d.N, group); dweight && K > 0)
      gemm(true, false, Vr, d.C, K, 1.0f, dl - (r0 - g0) * d.V, d.V, xr - (r0 - g0) * d.C, d.C,
           1.0f, dw_acc, d.C);
  }
  if (grads && dweight && dweight->dtype() != DType::f32) {
    T* dw = dweight->data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t v = 0; v < Vr; ++v) add_row(dw + v * d.C, dw_acc + v * d.C, d.C);
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

// lm_head_ce_backward (is_slice false: the weight is the whole vocabulary, v0 and valid are
// ignored) and lm_head_ce_partial_backward.
void ce_backward(const char* op, bool is_slice, Tensor* dx, Tensor* dweight, const Tensor& x,
                 const Tensor& weight, const Tensor& targets, const Tensor& lse, float scale,
                 int64_t v0, int64_t valid, int32_t ignore_index) {
  check_cpu(op, {dx, dweight, &x, &weight, &targets, &lse});
  CeDims d = check_ce(op, x, weight, targets, ignore_index, is_slice);
  if (is_slice) {
    check_slice(op, weight, d, v0, valid);
  } else {
    v0 = 0, valid = d.V;
  }
  check_dtype(op, "lse", lse, DType::f32);
  check_numel(op, "lse", lse, d.N);
  check_grads(op, dx, dweight, x, d);
  if (!dx && !dweight) return;
  CePass p{};
  p.targets = targets.data<int32_t>(), p.v0 = v0, p.valid = valid, p.ignore_index = ignore_index;
  p.lse_in = lse.data<float>(), p.dweight = dweight, p.scale = scale;
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    ce_pass<T>(d, x.data<T>(), weight.data<T>(), dx ? dx->data<T>() : nullptr, p);
  });
}

}  // namespace

double lm_head_ce_forward(Tensor& lse, int64_t* count, const Tensor& x, const Tensor& weight,
                          const Tensor& targets, int32_t ignore_index) {
  BRAID_DEVICE_DISPATCH(lm_head_ce_forward, (lse, count, x, weight, targets, ignore_index), &lse,
                        &x, &weight, &targets);
  return lm_head_ce_forward_backward(lse, count, nullptr, nullptr, x, weight, targets, 0.0f,
                                     ignore_index);
}

double lm_head_ce_forward_backward(Tensor& lse, int64_t* count, Tensor* dx, Tensor* dweight,
                                   const Tensor& x, const Tensor& weight, const Tensor& targets,
                                   float scale, int32_t ignore_index) {
  BRAID_DEVICE_DISPATCH(lm_head_ce_forward_backward,
                        (lse, count, dx, dweight, x, weight, targets, scale, ignore_index), &lse,
                        dx, dweight, &x, &weight, &targets);
  const char* op = dx || dweight ? "lm_head_ce_forward_backward" : "lm_head_ce_forward";
  check_cpu(op, {&lse, dx, dweight, &x, &weight, &targets});
  CeDims d = check_ce(op, x, weight, targets, ignore_index);
  check_dtype(op, "lse", lse, DType::f32);
  check_numel(op, "lse", lse, d.N);
  check_grads(op, dx, dweight, x, d);
  const int32_t* tg = targets.data<int32_t>();
  if (count) *count = count_rows(tg, d.N, ignore_index);
  CePass p{};
  p.targets = tg, p.v0 = 0, p.valid = d.V, p.ignore_index = ignore_index;
  p.lse_out = lse.data<float>(), p.dweight = dweight, p.scale = scale;
  return dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    return ce_pass<T>(d, x.data<T>(), weight.data<T>(), dx ? dx->data<T>() : nullptr, p);
  });
}

void lm_head_ce_backward(Tensor* dx, Tensor* dweight, const Tensor& x, const Tensor& weight,
                         const Tensor& targets, const Tensor& lse, float scale,
                         int32_t ignore_index) {
  BRAID_DEVICE_DISPATCH(lm_head_ce_backward,
                        (dx, dweight, x, weight, targets, lse, scale, ignore_index), dx, dweight,
                        &x, &weight, &targets, &lse);
  ce_backward("lm_head_ce_backward", false, dx, dweight, x, weight, targets, lse, scale, 0, 0,
              ignore_index);
}

void lm_head_ce_partial_forward(Tensor& row_max, Tensor& sumexp, Tensor& target_logit,
                                const Tensor& x, const Tensor& weight, const Tensor& targets,
                                int64_t v0, int64_t valid, int32_t ignore_index) {
  BRAID_DEVICE_DISPATCH(
      lm_head_ce_partial_forward,
      (row_max, sumexp, target_logit, x, weight, targets, v0, valid, ignore_index), &row_max,
      &sumexp, &target_logit, &x, &weight, &targets);
  const char* op = "lm_head_ce_partial_forward";
  check_cpu(op, {&row_max, &sumexp, &target_logit, &x, &weight, &targets});
  CeDims d = check_ce(op, x, weight, targets, ignore_index, true);
  check_slice(op, weight, d, v0, valid);
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"row_max", &row_max},
                         {"sumexp", &sumexp},
                         {"target_logit", &target_logit}}) {
    check_dtype(op, name, *t, DType::f32);
    check_numel(op, name, *t, d.N);
  }
  CePass p{};
  p.targets = targets.data<int32_t>(), p.v0 = v0, p.valid = valid, p.ignore_index = ignore_index;
  p.max_out = row_max.data<float>(), p.sumexp_out = sumexp.data<float>();
  p.target_out = target_logit.data<float>();
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    ce_pass<T>(d, x.data<T>(), weight.data<T>(), nullptr, p);
  });
}

void lm_head_ce_partial_backward(Tensor* dx, Tensor* dweight, const Tensor& x, const Tensor& weight,
                                 const Tensor& targets, const Tensor& lse, float scale, int64_t v0,
                                 int64_t valid, int32_t ignore_index) {
  BRAID_DEVICE_DISPATCH(lm_head_ce_partial_backward,
                        (dx, dweight, x, weight, targets, lse, scale, v0, valid, ignore_index), dx,
                        dweight, &x, &weight, &targets, &lse);
  ce_backward("lm_head_ce_partial_backward", true, dx, dweight, x, weight, targets, lse, scale, v0,
              valid, ignore_index);
}

void lm_head_logits(Tensor& logits, const Tensor& x, const Tensor& weight) {
  BRAID_DEVICE_DISPATCH(lm_head_logits, (logits, x, weight), &logits, &x, &weight);
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
    chunk_logits(logits.data<float>(), x.data<T>(), weight.data<T>(), d.N, d.V, d);
  });
}

}  // namespace braid::kernels
