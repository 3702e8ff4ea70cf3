// LM head fused with softmax cross-entropy on the device (cuda_ops.h; contracts in ops.h, the CPU
// twin and Note [Vocab-parallel cross-entropy] in cpu/cross_entropy.cpp), in chunks of rows so
// that at most 1 GiB of logits exist at once (Note [CUDA cross-entropy]).
//
// Note [CUDA cross-entropy]:
// - The vocabulary is padded to a multiple of 64 (Vp) for the GEMMs: the weight's real rows are
//   copied into a zero-padded [Vp, C] scratch. cuBLASLt runs GPT-2's odd V = 50257 five to six
//   times slower than V = 50304 (H100: 90 against 516-638 TFLOP/s for the logits, 126 against
//   735 for dx); the copy costs one pass over the weight.
// - Per chunk of R rows: logits[R, Vp] = x_r @ weight_p^T (cuBLASLt), then one block per row:
//   max and sumexp in one pass (online softmax) over the real columns, lse, target logit, loss,
//   and for the gradients dlogits = (softmax - onehot) * scale (0 on ignored rows and on the
//   padding columns) in place; dx_r += dlogits @ weight_p (k = Vp: the padding adds zeros),
//   dweight_p += dlogits^T @ x_r into an f32 [Vp, C] accumulator added to dweight once at the end.
// - Logits are f32, as on the CPU (bf16 logits would be 20% faster to make but move the loss and
//   lse by up to |z| 2^-9); for bf16 inputs the dlogits are rounded to bf16 for the two gradient
//   GEMMs, as the CPU kernel does. f16 with gradients: x and weight are widened to f32 and every
//   GEMM runs in f32 (f16 dlogits would flush the small ones to zero), as on the CPU.
// - The loss is summed in f64 on the host, in row order, from per-row f32 losses.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#include "braid/kernels/checks.h"
#include "braid/kernels/cuda/common.cuh"
#include "braid/kernels/cuda/cuda_ops.h"
#include "braid/kernels/cuda/gemm.h"
#include "braid/kernels/cuda/op_profile.h"

namespace braid::kernels::cuda {

namespace {

constexpr int kRowThreads = 512;
constexpr int kThreads = 256;
// f32 logits of one chunk: 1 GiB keeps GPT-2 batches of 16k rows to 4 chunks (each chunk reads
// and writes the f32 [Vp, C] dweight accumulator once; at 256 MiB that was 13 passes).
constexpr int64_t kLogitsBytes = int64_t{1} << 30;
constexpr int64_t kVocabPad = 64;

// ---- argument checks (the messages of the CPU kernels) ----

struct CeDims {
  int64_t N, C, V;
};

// As the CPU's check_ce; the targets are copied to the host (into *host_targets) for the range
// check and the count.
CeDims check_ce(const char* op, const Tensor& x, const Tensor& weight, const Tensor& targets,
                int32_t ignore_index, std::vector<int32_t>* host_targets, bool is_slice = false) {
  check_float(op, "x", x);
  check_same_dtype(op, "weight", weight, "x", x);
  BRAID_CHECK(weight.dim() == 2, op, ": weight must be [V,C], got ", weight.shape().str());
  CeDims d{rows_of(x), weight.size(1), weight.size(0)};
  BRAID_CHECK(cols_of(x) == d.C, op, ": x ", x.shape().str(), " has C=", cols_of(x), " but weight ",
              weight.shape().str(), " has C=", d.C);
  check_dtype(op, "targets", targets, DType::i32);
  BRAID_CHECK(targets.numel() == d.N, op, ": targets ", targets.shape().str(), " has ",
              targets.numel(), " entries for ", d.N, " rows of x ", x.shape().str());
  std::vector<int32_t>& t = *host_targets;
  t.resize(static_cast<size_t>(d.N));
  if (d.N > 0) {
    OpTimer timer("ce/targets_to_host");
    copy_to_host(t.data(), ptr<int32_t>(targets), t.size() * sizeof(int32_t));
  }
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

void check_grads(const char* op, const Tensor* dx, const Tensor* dweight, const Tensor& x,
                 const CeDims& d) {
  if (dx) check_same_dtype(op, "dx", *dx, "x", x), check_numel(op, "dx", *dx, d.N * d.C);
  if (dweight) {
    check_param_grad(op, "dweight", *dweight, "x", x);
    check_numel(op, "dweight", *dweight, d.V * d.C);
  }
}

template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) {
    return DType::f32;
  } else if constexpr (std::is_same_v<T, bf16_t>) {
    return DType::bf16;
  } else {
    return DType::f16;
  }
}

// c[m,n] (+)= op(a) @ op(b), all row-major.
void run_gemm(DType ab, DType c, const void* a, const void* b, void* cp, int64_t m, int64_t n,
              int64_t k, bool trans_a, bool trans_b, int64_t lda, int64_t ldb, int64_t ldc,
              float beta) {
  GemmArgs g;
  g.ab = ab, g.c = c, g.a = a, g.b = b, g.c_ptr = cp;
  g.m = m, g.n = n, g.k = k, g.trans_a = trans_a, g.trans_b = trans_b;
  g.lda = lda, g.ldb = ldb, g.ldc = ldc, g.alpha = 1.0f, g.beta = beta;
  gemm(g);
}

// Scratch of at least one byte (an empty request still gets a valid pointer).
Scratch scratch(int64_t nbytes) {
  return Scratch(static_cast<size_t>(std::max<int64_t>(nbytes, 16)));
}

// What the row kernel reads and writes per row n (null: not wanted).
struct RowArgs {
  const int32_t* targets;
  int64_t v0, valid;
  int32_t ignore_index;
  const float* lse_in;  // backward: use this lse
  float* lse_out;       // forward: lse over the real columns
  float* max_out;       // partial forward: row max, sumexp, target logit
  float* sumexp_out;
  float* target_out;
  float* row_loss;  // lse - z[target] for a counted row with a local target, else 0
  bool grads;
  float scale;
};

// (max, sum of exp(z - max)) pairs combined: the online softmax's merge.
struct MaxSum {
  float m, s;
};
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.0f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}
__device__ __forceinline__ MaxSum add(MaxSum a, float z) {
  if (z <= a.m) return {a.m, a.s + expf(z - a.m)};
  return {z, a.s * expf(a.m - z) + 1.0f};
}
__device__ MaxSum block_max_sum(MaxSum v, float* sm, float* ss) {
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum w{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
    v = merge(v, w);
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  __syncthreads();
  if (lane == 0) sm[warp] = v.m, ss[warp] = v.s;
  __syncthreads();
  v = lane < warps ? MaxSum{sm[lane], ss[lane]} : MaxSum{-INFINITY, 0.0f};
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum w{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
    v = merge(v, w);
  }
  return v;
}

// One block per row r of the chunk (global row r0 + r). z = f32 logits row (stride ldl, a
// multiple of 8 on a 16-byte boundary; real columns [0, valid), padding up to ldl). With grads,
// dlogits go to the same place of `dlogits` (DL = f32: the logits themselves, in place; bf16: a
// separate buffer for the bf16 GEMMs), 0 on the padding columns (the dx GEMM sums over them).
template <typename DL>
__global__ void ce_rows_kernel(float* logits, DL* dlogits, int64_t ldl, int64_t r0, RowArgs a) {
  __shared__ float sm[32], ss[32];
  constexpr int P = Pack128<float>::size;
  using L = float;
  const int64_t r = blockIdx.x, n = r0 + r;
  L* z = logits + r * ldl;
  DL* dz = dlogits + r * ldl;
  const int64_t V = a.valid;
  const int32_t t = a.targets[n];
  const bool counted = t != a.ignore_index;
  const int64_t tl = static_cast<int64_t>(t) - a.v0;  // target column, if local
  const bool local = counted && tl >= 0 && tl < V;
  const float zt = local ? ld(z + tl) : 0.0f;  // read by every thread before any write below
  const int64_t Vv = V / P * P;                // columns [0, Vv) in packs, [Vv, V) one by one
  float l;
  if (a.lse_in) {
    l = a.lse_in[n];
    __syncthreads();
  } else {
    MaxSum ms{-INFINITY, 0.0f};
    for (int64_t v = threadIdx.x * P; v < Vv; v += blockDim.x * P) {
      const Pack128<L> p = load128(z + v);
#pragma unroll
      for (int i = 0; i < P; ++i) ms = add(ms, p.get(i));
    }
    for (int64_t v = Vv + threadIdx.x; v < V; v += blockDim.x) ms = add(ms, ld(z + v));
    ms = block_max_sum(ms, sm, ss);
    l = ms.m + logf(ms.s);
    if (threadIdx.x == 0 && a.max_out) a.max_out[n] = ms.m, a.sumexp_out[n] = ms.s;
  }
  if (threadIdx.x == 0) {
    if (a.lse_out) a.lse_out[n] = l;
    if (a.target_out) a.target_out[n] = zt;
    if (a.row_loss) a.row_loss[n] = local ? l - zt : 0.0f;
  }
  if (!a.grads) return;
  const float sc = counted ? a.scale : 0.0f;
  for (int64_t v = threadIdx.x * P; v < ldl; v += blockDim.x * P) {
    const Pack128<L> p = load128(z + v);
    float g[P];
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int64_t c = v + i;
      g[i] = c < V ? expf(p.get(i) - l) * sc : 0.0f;
      if (local && c == tl) g[i] -= sc;
    }
    if constexpr (std::is_same_v<DL, float>) {
      Pack128<float> q;
#pragma unroll
      for (int i = 0; i < P; ++i) q.set(i, g[i]);
      store128(dz + v, q);
    } else {  // 4 f32 -> 4 bf16 (8 bytes)
#pragma unroll
      for (int i = 0; i < P; ++i) dz[v + i] = from_f32<DL>(g[i]);
    }
  }
}

// dst[i] += src[i] (src f32), rounded once to T.
template <typename T>
__global__ void add_f32_kernel(T* dst, const float* src, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    st(dst + i, ld(dst + i) + src[i]);
  }
}
template <typename T>
void add_f32(const char* op, T* dst, const float* src, int64_t n) {
  if (n <= 0) return;
  add_f32_kernel<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(dst, src, n);
  BRAID_CUDA_LAUNCHED(op);
}

// What one pass writes (device pointers; null: not wanted).
struct CePass {
  const int32_t* targets;
  int64_t v0, valid;
  int32_t ignore_index;
  const float* lse_in;
  float* lse_out;
  float* max_out;
  float* sumexp_out;
  float* target_out;
  Tensor* dweight;
  float scale;
  bool want_loss;
};

// The weight's first `rows` rows in a zero-padded [padded, C] copy (Note [CUDA cross-entropy]).
template <typename G>
Scratch padded_weight(const char* op, const void* w, DType wdt, int64_t rows, int64_t padded,
                      int64_t C) {
  Scratch out = scratch(padded * C * static_cast<int64_t>(sizeof(G)));
  if (wdt == dtype_of<G>()) {
    BRAID_CUDA_CHECK(cudaMemcpyAsync(out.get(), w, static_cast<size_t>(rows * C) * sizeof(G),
                                     cudaMemcpyDeviceToDevice, stream()),
                     op);
  } else {
    convert(out.get(), dtype_of<G>(), w, wdt, rows * C);
  }
  BRAID_CUDA_CHECK(cudaMemsetAsync(out.as<G>() + rows * C, 0,
                                   static_cast<size_t>((padded - rows) * C) * sizeof(G), stream()),
                   op);
  return out;
}

// One pass over the row chunks (the CPU's ce_pass). Returns the summed loss when want_loss.
template <typename T>
double ce_pass(const char* op, const CeDims& d, const T* x, const T* w, T* dx, const CePass& p) {
  const int64_t Vr = p.valid;
  Tensor* dweight = p.dweight;
  const bool grads = (dx || dweight) && Vr > 0;
  if (d.N == 0) return 0.0;
  // f16 with gradients: every GEMM in f32 on widened copies (G = f32), as the CPU does.
  const bool widen = std::is_same_v<T, f16_t> && grads;
  const DType tdt = dtype_of<T>();
  const DType gdt = widen ? DType::f32 : tdt;
  // Logits in f32 (the CPU's numerics); bf16 dlogits in their own buffer for the bf16 GEMMs.
  const bool low_dl = std::is_same_v<T, bf16_t> && grads;
  const int64_t Vp = std::max<int64_t>(kVocabPad, ceil_div(Vr, kVocabPad) * kVocabPad);
  const int64_t ldl = Vp;
  const int64_t R = std::clamp<int64_t>(kLogitsBytes / (ldl * 4), 1, d.N);
  Scratch logits = scratch(R * ldl * 4);
  Scratch dl_low = scratch(low_dl ? R * ldl * 2 : 0);
  Scratch row_loss = scratch(p.want_loss ? d.N * 4 : 0);
  // The padded weight, in the GEMMs' dtype (f32 for widened f16).
  Scratch wp = widen ? padded_weight<float>(op, w, tdt, Vr, Vp, d.C)
                     : padded_weight<T>(op, w, tdt, Vr, Vp, d.C);
  Scratch wide_x = scratch(widen ? R * d.C * 4 : 0);
  Scratch dx_tmp = scratch(widen && dx ? R * d.C * 4 : 0);
  // dweight accumulates in f32 over the chunks in a padded [Vp, C] scratch, added once.
  Scratch dw_acc;
  if (grads && dweight) {
    dw_acc = scratch(Vp * d.C * 4);
    BRAID_CUDA_CHECK(cudaMemsetAsync(dw_acc.get(), 0, static_cast<size_t>(Vp * d.C) * 4, stream()),
                     op);
  }
  RowArgs ra{};
  ra.targets = p.targets, ra.v0 = p.v0, ra.valid = Vr, ra.ignore_index = p.ignore_index;
  ra.lse_in = p.lse_in, ra.lse_out = p.lse_out, ra.max_out = p.max_out;
  ra.sumexp_out = p.sumexp_out, ra.target_out = p.target_out;
  ra.row_loss = p.want_loss ? row_loss.as<float>() : nullptr;
  ra.grads = grads, ra.scale = p.scale;
  for (int64_t r0 = 0; r0 < d.N; r0 += R) {
    const int64_t rows = std::min(R, d.N - r0);
    const void* xr = x + r0 * d.C;
    if (widen) {
      convert(wide_x.get(), DType::f32, xr, tdt, rows * d.C);
      xr = wide_x.get();
    }
    float* lg = logits.as<float>();
    if (d.C > 0) {
      OpTimer t("ce/logits_gemm");
      run_gemm(gdt, DType::f32, xr, wp.get(), lg, rows, Vp, d.C, false, true, d.C, d.C, ldl, 0.0f);
    } else {  // C == 0: every logit is 0
      BRAID_CUDA_CHECK(cudaMemsetAsync(lg, 0, static_cast<size_t>(rows * ldl) * 4, stream()), op);
    }
    {
      OpTimer t("ce/rows");
      const unsigned blocks = static_cast<unsigned>(rows);
      if (low_dl) {
        ce_rows_kernel<bf16_t>
            <<<blocks, kRowThreads, 0, stream()>>>(lg, dl_low.as<bf16_t>(), ldl, r0, ra);
      } else {
        ce_rows_kernel<float><<<blocks, kRowThreads, 0, stream()>>>(lg, lg, ldl, r0, ra);
      }
      BRAID_CUDA_LAUNCHED(op);
    }
    if (!grads || d.C == 0) continue;
    const void* dl = low_dl ? dl_low.get() : static_cast<const void*>(lg);
    if (dx) {
      T* dxr = dx + r0 * d.C;
      if (widen) {  // f32 product, added to the f16 dx with one rounding
        run_gemm(DType::f32, DType::f32, dl, wp.get(), dx_tmp.get(), rows, d.C, Vp, false, false,
                 ldl, d.C, d.C, 0.0f);
        add_f32(op, dxr, dx_tmp.as<float>(), rows * d.C);
      } else {
        OpTimer t("ce/dx_gemm");
        run_gemm(gdt, tdt, dl, wp.get(), dxr, rows, d.C, Vp, false, false, ldl, d.C, d.C, 1.0f);
      }
    }
    if (dweight) {
      OpTimer t("ce/dw_gemm");
      run_gemm(gdt, DType::f32, dl, xr, dw_acc.get(), Vp, d.C, rows, true, false, ldl, d.C, d.C,
               1.0f);
    }
  }
  if (grads && dweight) {
    dispatch_float(dweight->dtype(), op, [&](auto gtag) {
      using D = decltype(gtag);
      add_f32(op, ptr<D>(*dweight), dw_acc.as<float>(), Vr * d.C);
    });
  }
  if (!p.want_loss) return 0.0;
  std::vector<float> host(static_cast<size_t>(d.N));
  copy_to_host(host.data(), row_loss.get(), host.size() * sizeof(float));
  double loss = 0;  // summed in row order, as the CPU kernel
  for (float l : host) loss += static_cast<double>(l);
  return loss;
}

// lm_head_ce_backward (is_slice false: v0 and valid are ignored) and the partial backward.
void ce_backward(const char* op, bool is_slice, Tensor* dx, Tensor* dweight, const Tensor& x,
                 const Tensor& weight, const Tensor& targets, const Tensor& lse, float scale,
                 int64_t v0, int64_t valid, int32_t ignore_index) {
  check_cuda(op, {dx, dweight, &x, &weight, &targets, &lse});
  std::vector<int32_t> tg;
  CeDims d = check_ce(op, x, weight, targets, ignore_index, &tg, is_slice);
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
  p.targets = ptr<int32_t>(targets), p.v0 = v0, p.valid = valid, p.ignore_index = ignore_index;
  p.lse_in = ptr<float>(lse), p.dweight = dweight, p.scale = scale;
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    ce_pass<T>(op, d, ptr<T>(x), ptr<T>(weight), dx ? ptr<T>(*dx) : nullptr, p);
  });
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
  check_cuda(op, {&lse, dx, dweight, &x, &weight, &targets});
  std::vector<int32_t> tg;
  CeDims d = check_ce(op, x, weight, targets, ignore_index, &tg);
  check_dtype(op, "lse", lse, DType::f32);
  check_numel(op, "lse", lse, d.N);
  check_grads(op, dx, dweight, x, d);
  if (count)
    *count = std::count_if(tg.begin(), tg.end(), [&](int32_t t) { return t != ignore_index; });
  CePass p{};
  p.targets = ptr<int32_t>(targets), p.v0 = 0, p.valid = d.V, p.ignore_index = ignore_index;
  p.lse_out = ptr<float>(lse), p.dweight = dweight, p.scale = scale, p.want_loss = true;
  return dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    return ce_pass<T>(op, d, ptr<T>(x), ptr<T>(weight), dx ? ptr<T>(*dx) : nullptr, p);
  });
}

void lm_head_ce_backward(Tensor* dx, Tensor* dweight, const Tensor& x, const Tensor& weight,
                         const Tensor& targets, const Tensor& lse, float scale,
                         int32_t ignore_index) {
  ce_backward("lm_head_ce_backward", false, dx, dweight, x, weight, targets, lse, scale, 0, 0,
              ignore_index);
}

void lm_head_ce_partial_forward(Tensor& row_max, Tensor& sumexp, Tensor& target_logit,
                                const Tensor& x, const Tensor& weight, const Tensor& targets,
                                int64_t v0, int64_t valid, int32_t ignore_index) {
  const char* op = "lm_head_ce_partial_forward";
  check_cuda(op, {&row_max, &sumexp, &target_logit, &x, &weight, &targets});
  std::vector<int32_t> tg;
  CeDims d = check_ce(op, x, weight, targets, ignore_index, &tg, true);
  check_slice(op, weight, d, v0, valid);
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"row_max", &row_max},
                         {"sumexp", &sumexp},
                         {"target_logit", &target_logit}}) {
    check_dtype(op, name, *t, DType::f32);
    check_numel(op, name, *t, d.N);
  }
  CePass p{};
  p.targets = ptr<int32_t>(targets), p.v0 = v0, p.valid = valid, p.ignore_index = ignore_index;
  p.max_out = ptr<float>(row_max), p.sumexp_out = ptr<float>(sumexp);
  p.target_out = ptr<float>(target_logit);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    ce_pass<T>(op, d, ptr<T>(x), ptr<T>(weight), nullptr, p);
  });
}

void lm_head_ce_partial_backward(Tensor* dx, Tensor* dweight, const Tensor& x, const Tensor& weight,
                                 const Tensor& targets, const Tensor& lse, float scale, int64_t v0,
                                 int64_t valid, int32_t ignore_index) {
  ce_backward("lm_head_ce_partial_backward", true, dx, dweight, x, weight, targets, lse, scale, v0,
              valid, ignore_index);
}

void lm_head_logits(Tensor& logits, const Tensor& x, const Tensor& weight) {
  const char* op = "lm_head_logits";
  check_cuda(op, {&logits, &x, &weight});
  check_float(op, "x", x);
  check_same_dtype(op, "weight", weight, "x", x);
  check_dtype(op, "logits", logits, DType::f32);
  BRAID_CHECK(weight.dim() == 2 && cols_of(x) == weight.size(1), op, ": x ", x.shape().str(),
              " and weight ", weight.shape().str(), " disagree on C");
  CeDims d{rows_of(x), weight.size(1), weight.size(0)};
  BRAID_CHECK(logits.numel() == d.N * d.V && cols_of(logits) == d.V, op, ": logits has shape ",
              logits.shape().str(), ", expected [", d.N, ",", d.V, "]");
  if (d.N * d.V == 0) return;
  if (d.C == 0) {
    BRAID_CUDA_CHECK(cudaMemsetAsync(ptr<float>(logits), 0,
                                     static_cast<size_t>(d.N * d.V) * sizeof(float), stream()),
                     op);
    return;
  }
  run_gemm(x.dtype(), DType::f32, x.device_data(), weight.device_data(), ptr<float>(logits), d.N,
           d.V, d.C, false, true, d.C, d.C, d.V, 0.0f);
}

}  // namespace braid::kernels::cuda
