// Milliseconds per call of each kernel on braid's GPT-2 small training shapes
// (B 8, T 256, C 384, NH 6, HS 64, MLP 1536, vocab 8192), f32, and the GFLOP/s of the
// GEMM-heavy ones. Usage: kernels_bench [reps] [dtype f32|bf16|f16]
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <string>

#include "braid/core/tensor.h"
#include "braid/kernels/ops.h"

using namespace braid;
namespace k = braid::kernels;

namespace {

// Note [CPU time]: on a shared machine wall time mostly measures the neighbours; with
// BRAID_BENCH_CPU_TIME=1 a call is timed as process CPU time / threads instead (spin-waits
// count, so it stays honest for parallel regions).
double now_ms() {
  if (std::getenv("BRAID_BENCH_CPU_TIME")) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6) / omp_get_max_threads();
  }
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double best_ms(const std::function<void()>& fn, int reps) {
  fn();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    double t0 = now_ms();
    fn();
    best = std::min(best, now_ms() - t0);
  }
  return best;
}

void report(const char* what, double ms, double gflop = 0) {
  if (gflop > 0)
    std::printf("%-28s %9.3f ms  %7.1f GFLOP/s\n", what, ms, gflop / ms * 1e3);
  else
    std::printf("%-28s %9.3f ms\n", what, ms);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = argc > 1 ? std::atoi(argv[1]) : 5;
  DType dt = argc > 2 ? dtype_from_name(argv[2]) : DType::f32;
  const int64_t B = 8, T = 256, C = 384, NH = 6, HS = 64, H = 1536, V = 8192, N = B * T;
  std::printf("kernels_bench: %s, %d threads, GEMM %s, best of %d\n",
              std::string(dtype_name(dt)).c_str(), omp_get_max_threads(), k::gemm_backend_name(),
              reps);
  Rng rng(7);
  auto rnd = [&](Shape s, float sd = 1.0f) { return Tensor::randn(s, rng, sd, dt); };

  Tensor q = rnd({B, T, NH, HS}), kk = rnd({B, T, NH, HS}), v = rnd({B, T, NH, HS});
  Tensor out = Tensor::empty({B, T, NH, HS}, dt), lse = Tensor::empty({B, NH, T});
  Tensor dq = Tensor::zeros({B, T, NH, HS}, dt), dk = dq.clone(), dv = dq.clone();
  // causal: ~half of 4 B NH T^2 HS for the forward, 2.5x that for the backward
  double attn_f = 2.0 * B * NH * T * T * HS * 1e-9;
  report("attention_forward", best_ms([&] { k::attention_forward(out, lse, q, kk, v); }, reps),
         attn_f);
  report("attention_backward",
         best_ms([&] { k::attention_backward(&dq, &dk, &dv, out, q, kk, v, out, lse); }, reps),
         2.5 * attn_f);

  Tensor x = rnd({N, C}), wl = rnd({V, C}, 0.02f);
  Tensor tg = Tensor::empty({N}, DType::i32);
  for (int64_t i = 0; i < N; ++i) tg.data<int32_t>()[i] = static_cast<int32_t>(rng.below(V));
  Tensor lse2 = Tensor::empty({N});
  Tensor dx = Tensor::zeros({N, C}, dt), dwl = Tensor::zeros({V, C}, dt);
  int64_t count;
  double ce_f = 2.0 * N * V * C * 1e-9;
  report("lm_head_ce_forward",
         best_ms([&] { k::lm_head_ce_forward(lse2, &count, x, wl, tg); }, reps), ce_f);
  report("lm_head_ce_backward",
         best_ms([&] { k::lm_head_ce_backward(&dx, &dwl, x, wl, tg, lse2, 1.0f / N); }, reps),
         3 * ce_f);

  report(
      "lm_head_ce_forward_backward",
      best_ms([&] { k::lm_head_ce_forward_backward(lse2, &count, &dx, &dwl, x, wl, tg, 1.0f / N); },
              reps),
      3 * ce_f);

  Tensor w1 = rnd({H, C}, 0.02f), b1 = rnd({H}), h = Tensor::empty({N, H}, dt);
  Tensor dh = rnd({N, H}), dw1 = Tensor::zeros({H, C}, dt), db1 = Tensor::zeros({H}, dt);
  double fc_f = 2.0 * N * H * C * 1e-9;
  report("linear_forward fc", best_ms([&] { k::linear_forward(h, x, w1, &b1); }, reps), fc_f);
  report("linear_backward fc",
         best_ms([&] { k::linear_backward(&dx, &dw1, &db1, dh, x, w1); }, reps), 2 * fc_f);

  Tensor lw = rnd({C}), lb = rnd({C}), ln = Tensor::empty({N, C}, dt);
  Tensor mean = Tensor::empty({N}), rstd = Tensor::empty({N});
  Tensor dlw = Tensor::zeros({C}, dt), dlb = Tensor::zeros({C}, dt);
  report("layernorm_forward",
         best_ms([&] { k::layernorm_forward(ln, mean, rstd, x, lw, lb, 1e-5f); }, reps));
  report("layernorm_backward",
         best_ms([&] { k::layernorm_backward(&dx, &dlw, &dlb, x, x, lw, mean, rstd); }, reps));
  Tensor g = Tensor::empty({N, H}, dt), dg = Tensor::zeros({N, H}, dt);
  report("gelu_forward", best_ms([&] { k::gelu_forward(g, h); }, reps));
  report("gelu_backward", best_ms([&] { k::gelu_backward(dg, dh, h); }, reps));
  Tensor qkv = rnd({N, 3 * C}), qc = Tensor::empty({N, C}, dt);
  report("copy_columns", best_ms([&] { k::copy_columns(qc, qkv, C); }, reps));
  report("add_columns", best_ms([&] { k::add_columns(qkv, qc, C); }, reps));
  Tensor r1 = rnd({N, C}), r2 = rnd({N, C}), r3 = Tensor::empty({N, C}, dt);
  report("add_forward", best_ms([&] { k::add_forward(r3, r1, r2); }, reps));
  Tensor ids = tg.view({B, T}), wpe = rnd({1024, C}), emb = Tensor::empty({B, T, C}, dt);
  report("embedding_forward", best_ms([&] { k::embedding_forward(emb, ids, wl, &wpe); }, reps));
  report("embedding_backward",
         best_ms([&] { k::embedding_backward(&dwl, nullptr, emb, ids); }, reps));
  const int64_t P = 14'000'000;  // ~GPT-2 small-ish parameter count
  Tensor p = Tensor::randn({P}, rng), pg = Tensor::randn({P}, rng, 1.0f, dt);
  Tensor m = Tensor::zeros({P}), vv = Tensor::zeros({P});
  int64_t t = 0;
  report("adamw_step (14M params)",
         best_ms([&] { k::adamw_step(p, pg, m, vv, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, ++t); }, reps));
  return 0;
}
