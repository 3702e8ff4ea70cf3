// GEMM GFLOP/s, side by side for each library, on the products braid's GPT-2 small model
// (d_model 384, MLP 1536, vocab 8192, B*T = 2048) runs in linear forward/backward and the
// lm-head chunks, plus a 1024^3 square. Columns:
//   braid      kernels::matmul (the configured backend; oneDNN matmul primitives cached per shape)
//   dnnl_sgemm oneDNN's BLAS-like sgemm entry point
//   openblas   cblas_sgemm (set OPENBLAS_CORETYPE=SkylakeX on Zen 5: 0.3.21 falls back to AVX2)
//   braid_bf16 kernels::matmul on bf16 tensors (f32 accumulation)
//   braid_f16  kernels::matmul on f16 tensors (widened to f32: Note [f16 GEMM], gemm_f16.cpp)
//   dnnl_f16   oneDNN's own f16 matmul primitive, "n/a" where oneDNN has none for this CPU
// Threads: OMP_NUM_THREADS for braid/oneDNN; OpenBLAS is given the same count.
// Usage: gemm_bench [reps]
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "braid/core/tensor.h"
#include "braid/kernels/ops.h"
#ifdef BRAID_BENCH_ONEDNN
#include <dnnl.h>
#include <dnnl.hpp>
#endif
#ifdef BRAID_BENCH_OPENBLAS
#include <cblas.h>
#endif

using namespace braid;

namespace {

struct Shape3 {
  const char* what;
  int64_t M, N, K;
  bool ta, tb;
};

// Note [CPU time]: on a shared machine wall time mostly measures the neighbours; with
// BRAID_BENCH_CPU_TIME=1 a call is timed as process CPU time / threads instead (spin-waits
// count; OpenBLAS's own pool threads count too).
double now_s() {
  if (std::getenv("BRAID_BENCH_CPU_TIME")) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (ts.tv_sec + ts.tv_nsec * 1e-9) / omp_get_max_threads();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best-of-reps GFLOP/s of fn for an M x N x K product.
double gflops(const std::function<void()>& fn, const Shape3& s, int reps) {
  fn();  // warm-up: primitive creation, first touch
  double best = 0, flops = 2.0 * s.M * s.N * s.K;
  for (int r = 0; r < reps; ++r) {
    double t0 = now_s();
    fn();
    best = std::max(best, flops / (now_s() - t0) * 1e-9);
  }
  return best;
}

#ifdef BRAID_BENCH_ONEDNN
// GFLOP/s of oneDNN's f16 x f16 -> f32 matmul primitive, or -1 where it cannot be created.
double dnnl_f16_gflops(const Shape3& s, Tensor& a, Tensor& b, Tensor& c, int reps) {
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  dnnl::memory::desc ma({s.M, s.K}, dt::f16, s.ta ? dims{1, s.M} : dims{s.K, 1});
  dnnl::memory::desc mb({s.K, s.N}, dt::f16, s.tb ? dims{1, s.K} : dims{s.N, 1});
  dnnl::memory::desc mc({s.M, s.N}, dt::f32, dims{s.N, 1});
  try {
    dnnl::matmul prim(dnnl::matmul::primitive_desc(dnnl::matmul::desc(ma, mb, mc), eng));
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, dnnl::memory(ma, eng, a.raw_data())},
        {DNNL_ARG_WEIGHTS, dnnl::memory(mb, eng, b.raw_data())},
        {DNNL_ARG_DST, dnnl::memory(mc, eng, c.raw_data())}};
    return gflops(
        [&] {
          prim.execute(stream, args);
          stream.wait();
        },
        s, reps);
  } catch (const dnnl::error&) {
    return -1;
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
  int reps = argc > 1 ? std::atoi(argv[1]) : 5;
  int threads = omp_get_max_threads();
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
#ifdef BRAID_BENCH_OPENBLAS
  openblas_set_num_threads(threads);
  std::printf("openblas: %s, core %s (OPENBLAS_CORETYPE=%s)\n", openblas_get_config(),
              openblas_get_corename(), coretype ? coretype : "unset");
#endif
  std::printf("braid GEMM backend: %s, %d OpenMP threads, best of %d\n\n",
              kernels::gemm_backend_name(), threads, reps);
  const std::vector<Shape3> shapes = {
      {"qkv fwd      ", 2048, 1152, 384, false, true},
      {"qkv dinp     ", 2048, 384, 1152, false, false},
      {"qkv dweight  ", 1152, 384, 2048, true, false},
      {"proj fwd     ", 2048, 384, 384, false, true},
      {"proj dinp    ", 2048, 384, 384, false, false},
      {"proj dweight ", 384, 384, 2048, true, false},
      {"fc fwd       ", 2048, 1536, 384, false, true},
      {"fc dinp      ", 2048, 384, 1536, false, false},
      {"fc dweight   ", 1536, 384, 2048, true, false},
      {"fcproj fwd   ", 2048, 384, 1536, false, true},
      {"fcproj dinp  ", 2048, 1536, 384, false, false},
      {"fcproj dwght ", 384, 1536, 2048, true, false},
      {"lmhead fwd   ", 256, 8192, 384, false, true},
      {"lmhead dx    ", 256, 384, 8192, false, false},
      {"lmhead dW    ", 8192, 384, 256, true, false},
      {"square 1024  ", 1024, 1024, 1024, false, false},
  };
  std::printf("%-14s %5s %5s %5s %2s | %8s %10s %8s %10s %9s %8s  (GFLOP/s)\n", "product", "M", "N",
              "K", "op", "braid", "dnnl_sgemm", "openblas", "braid_bf16", "braid_f16", "dnnl_f16");
  Rng rng(1);
  for (const Shape3& s : shapes) {
    Shape sa = s.ta ? Shape{s.K, s.M} : Shape{s.M, s.K};
    Shape sb = s.tb ? Shape{s.N, s.K} : Shape{s.K, s.N};
    Tensor a = Tensor::randn(sa, rng), b = Tensor::randn(sb, rng);
    Tensor c = Tensor::zeros(Shape{s.M, s.N});
    Tensor a16 = a.to(DType::bf16), b16 = b.to(DType::bf16), c16 = c.to(DType::bf16);
    Tensor ah = a.to(DType::f16), bh = b.to(DType::f16), ch = c.to(DType::f16);
    // Backward products accumulate (beta = 1), as the kernels do.
    float beta = s.tb ? 0.0f : 1.0f;
    double braid_f32 = gflops([&] { kernels::matmul(c, a, b, s.ta, s.tb, 1.0f, beta); }, s, reps);
    double sgemm = 0, oblas = 0;
#ifdef BRAID_BENCH_ONEDNN
    sgemm = gflops(
        [&] {
          dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.M, s.N, s.K, 1.0f, a.data<float>(),
                     sa[1], b.data<float>(), sb[1], beta, c.data<float>(), s.N);
        },
        s, reps);
#endif
#ifdef BRAID_BENCH_OPENBLAS
    oblas = gflops(
        [&] {
          cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans,
                      s.tb ? CblasTrans : CblasNoTrans, s.M, s.N, s.K, 1.0f, a.data<float>(), sa[1],
                      b.data<float>(), sb[1], beta, c.data<float>(), s.N);
        },
        s, reps);
#endif
    double bf16 = gflops([&] { kernels::matmul(c16, a16, b16, s.ta, s.tb, 1.0f, beta); }, s, reps);
    double f16 = gflops([&] { kernels::matmul(ch, ah, bh, s.ta, s.tb, 1.0f, beta); }, s, reps);
    char dnnl_f16[16] = "n/a";
#ifdef BRAID_BENCH_ONEDNN
    if (double g = dnnl_f16_gflops(s, ah, bh, c, reps); g >= 0)
      std::snprintf(dnnl_f16, sizeof(dnnl_f16), "%.1f", g);
#endif
    std::printf("%-14s %5ld %5ld %5ld %c%c | %8.1f %10.1f %8.1f %10.1f %9.1f %8s\n", s.what,
                long(s.M), long(s.N), long(s.K), s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', braid_f32,
                sgemm, oblas, bf16, f16, dnnl_f16);
  }
#ifdef BRAID_BENCH_ONEDNN
  // Cost of building a matmul primitive per call instead of caching it.
  {
    using dt = dnnl::memory::data_type;
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    const int n = 200;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      dnnl::memory::desc md_a({64, 64}, dt::f32, dnnl::memory::dims{64, 1});
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md_a, md_a, md_a), eng);
      dnnl::matmul prim(pd);
    }
    double us =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / n * 1e6;
    std::printf("\noneDNN matmul primitive creation (64x64x64, cache hit): %.1f us per call\n", us);
  }
#endif
  std::printf(
      "measure_gemm_peak_gflops(1024, f32) = %.1f, (1024, bf16) = %.1f, (1024, f16) = %.1f\n",
      kernels::measure_gemm_peak_gflops(1024, DType::f32),
      kernels::measure_gemm_peak_gflops(1024, DType::bf16),
      kernels::measure_gemm_peak_gflops(1024, DType::f16));
  return 0;
}
