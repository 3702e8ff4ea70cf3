// GEMM through oneDNN's matmul primitive (f32 and bf16 -> f32). Primitives are cached per
// shape in a thread_local map: creating one costs tens of microseconds, executing a cached
// one does not, and thread_local keeps ranks-as-threads independent (no global state).
// Primitives run with a user scratchpad: oneDNN's work memory is the calling thread's kernel
// scratch slot 6, so it is charged to the rank's tracker (Note [Kernel scratch]) instead of
// being held by the library where no tracker sees it.
// Note [oneDNN threads]: oneDNN here is built on GNU OpenMP, so it uses the calling thread's
// omp_get_max_threads(), like every other kernel; called inside a parallel region it runs
// on one thread.
#include <dnnl.hpp>

#include <cstring>
#include <tuple>
#include <unordered_map>

#include "braid/core/error.h"
#include "braid/kernels/cpu/common.h"
#include "braid/kernels/cpu/gemm.h"
#include "braid/kernels/ops.h"
#include "braid/kernels/scratch_plan.h"

namespace braid::kernels {

const char* gemm_backend_name() {
  return "onednn";
}

namespace cpu {
namespace {

using dt = dnnl::memory::data_type;

struct Key {
  int64_t m, n, k, lda, ldb, ldc;
  uint32_t alpha_bits, beta_bits;
  bool ta, tb, has_bias;
  dt type;
  bool operator==(const Key& o) const {
    return std::tie(m, n, k, lda, ldb, ldc, alpha_bits, beta_bits, ta, tb, has_bias, type) ==
           std::tie(o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.alpha_bits, o.beta_bits, o.ta, o.tb,
                    o.has_bias, o.type);
  }
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(k.m), mix(k.n), mix(k.k), mix(k.lda), mix(k.ldb), mix(k.ldc), mix(k.alpha_bits);
    mix(k.beta_bits), mix(k.ta), mix(k.tb), mix(k.has_bias), mix(static_cast<uint64_t>(k.type));
    return h;
  }
};

struct Entry {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c, bias, scratchpad;
};

struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::unordered_map<Key, Entry, KeyHash> cache;
};

Context& context() {
  thread_local Context ctx;
  return ctx;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// sgemm's path (Note [sgemm vs matmul]): no primitive, no scratchpad of ours.
bool uses_sgemm(dt type, bool tb, bool bias) {
  return type == dt::f32 && !tb && !bias;
}

dnnl::matmul::primitive_desc make_pd(const Key& key, const dnnl::engine& engine) {
  using dims = dnnl::memory::dims;
  const dt type = key.type;
  dnnl::memory::desc a({key.m, key.k}, type, key.ta ? dims{1, key.lda} : dims{key.lda, 1});
  dnnl::memory::desc b({key.k, key.n}, type, key.tb ? dims{1, key.ldb} : dims{key.ldb, 1});
  dnnl::memory::desc c({key.m, key.n}, dt::f32, dims{key.ldc, 1});
  dnnl::memory::desc bd =
      key.has_bias ? dnnl::memory::desc({1, key.n}, dt::f32, dims{key.n, 1}) : dnnl::memory::desc();
  float alpha, beta;
  std::memcpy(&alpha, &key.alpha_bits, 4);
  std::memcpy(&beta, &key.beta_bits, 4);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
  return dnnl::matmul::primitive_desc(
      key.has_bias ? dnnl::matmul::desc(a, b, bd, c) : dnnl::matmul::desc(a, b, c), attr, engine);
}

Entry make_entry(const Key& key, const dnnl::engine& engine) {
  const dnnl::matmul::primitive_desc pd = make_pd(key, engine);
  return Entry{dnnl::matmul(pd), pd.src_desc(),  pd.weights_desc(),
               pd.dst_desc(),    pd.bias_desc(), pd.scratchpad_desc()};
}

void run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const void* A, int64_t lda,
         const void* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias,
         dt type) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        C[i * ldc + j] = (beta == 0.0f ? 0.0f : beta * C[i * ldc + j]) + (bias ? bias[j] : 0.0f);
    return;
  }
  if (uses_sgemm(type, tb, bias != nullptr)) {
    // Note [sgemm vs matmul]: for B not transposed (linear backward: dinp, dweight) oneDNN's
    // dnnl_sgemm runs ~5-10% faster than the matmul primitive here; for B^T (the forward
    // x @ W^T) the primitive is up to 2x faster (bench/gemm_bench.cpp).
    dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', 'N', M, N, K, alpha, static_cast<const float*>(A),
                                  lda, static_cast<const float*>(B), ldb, beta, C, ldc);
    BRAID_CHECK(st == dnnl_success, "oneDNN sgemm failed (status ", static_cast<int>(st), ") for ",
                M, "x", N, "x", K);
    return;
  }
  Context& ctx = context();
  Key key{M, N, K, lda, ldb, ldc, bits_of(alpha), bits_of(beta), ta, tb, bias != nullptr, type};
  auto it = ctx.cache.find(key);
  if (it == ctx.cache.end()) {
    Entry made = make_entry(key, ctx.engine);
    if (ctx.cache.size() > 512) ctx.cache.clear();  // bound memory for shape-churning callers
    it = ctx.cache.emplace(key, std::move(made)).first;
  }
  Entry& e = it->second;
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(e.a, ctx.engine, const_cast<void*>(A))},
      {DNNL_ARG_WEIGHTS, dnnl::memory(e.b, ctx.engine, const_cast<void*>(B))},
      {DNNL_ARG_DST, dnnl::memory(e.c, ctx.engine, C)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(e.bias, ctx.engine, const_cast<float*>(bias)));
  if (size_t bytes = e.scratchpad.get_size(); bytes > 0)
    args.emplace(DNNL_ARG_SCRATCHPAD,
                 dnnl::memory(e.scratchpad, ctx.engine, scratch_raw(6, bytes)));
  e.prim.execute(ctx.stream, args);
  ctx.stream.wait();
}

}  // namespace

void plan_gemm(ScratchPlan& plan, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float beta,
               bool bias, DType dtype) {
  const dt type = dtype == DType::bf16 ? dt::bf16 : dt::f32;
  if (M == 0 || N == 0 || K == 0 || uses_sgemm(type, tb, bias)) return;
  // oneDNN sizes the scratchpad for omp_get_max_threads() when the primitive is made.
  const int had = omp_get_max_threads();
  omp_set_num_threads(plan.threads());
  const Key key{M,  N,  K,    ta ? M : K, tb ? K : N, N, bits_of(1.0f), bits_of(beta),
                ta, tb, bias, type};
  dnnl::memory::desc pad;
  try {
    pad = make_pd(key, context().engine).scratchpad_desc();
  } catch (...) {
    omp_set_num_threads(had);
    throw;
  }
  omp_set_num_threads(had);
  plan.take(6, static_cast<int64_t>(pad.get_size()));
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
          const float* bias) {
  run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, dt::f32);
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
          int64_t lda, const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc,
          const float* bias) {
  run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, dt::bf16);
}

}  // namespace cpu
}  // namespace braid::kernels
