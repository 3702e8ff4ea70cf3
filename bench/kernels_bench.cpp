// Milliseconds per call of each kernel on braid's GPT-2 small training shapes
// (B 8, T 256, C 384, NH 6, HS 64, MLP 1536, vocab 8192), and the GFLOP/s of the GEMM-heavy
// ones; the element-wise helpers also on 14M elements (a gradient buffer: from memory, not
// cache).
// Usage: kernels_bench [reps] [f32|bf16|f16]  one dtype, each kernel best of reps calls
//        kernels_bench [rounds] all           f32, bf16 and f16 side by side with their ratios
//                                             (Note [Interleaved rounds])
//        BRAID_BENCH_ONLY=<prefix>            only the kernels whose name starts with prefix
#include <omp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <vector>

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

double time_ms(const std::function<void()>& fn) {
  double t0 = now_ms();
  fn();
  return now_ms() - t0;
}

struct Op {
  std::string name;
  std::function<void()> run;
  double gflop;  // 0: not a GEMM-heavy kernel
};

// Every benchmarked kernel on its own tensors of one dtype (parameters and optimiser state f32,
// gradients of parameters f32 as mixed precision keeps them).
class Workload {
 public:
  explicit Workload(DType dt) : dt_(dt) {
    const int64_t B = 8, T = 256, C = 384, NH = 6, HS = 64, H = 1536, V = 8192, N = B * T;
    const int64_t P = 14'000'000;  // ~GPT-2 small-ish parameter count
    Tensor &q = rnd({B, T, NH, HS}), &kk = rnd({B, T, NH, HS}), &v = rnd({B, T, NH, HS});
    Tensor &out = zeros({B, T, NH, HS}), &lse = zeros({B, NH, T}, DType::f32);
    Tensor &dq = zeros({B, T, NH, HS}), &dk = zeros({B, T, NH, HS}), &dv = zeros({B, T, NH, HS});
    // causal: ~half of 4 B NH T^2 HS for the forward, 2.5x that for the backward
    const double attn_f = 2.0 * B * NH * T * T * HS * 1e-9;
    add(
        "attention_forward", [&] { k::attention_forward(out, lse, q, kk, v); }, attn_f);
    add(
        "attention_backward",
        [&] { k::attention_backward(&dq, &dk, &dv, out, q, kk, v, out, lse); }, 2.5 * attn_f);

    Tensor &x = rnd({N, C}), &wl = rnd({V, C}, 0.02f), &tg = ids({N}, V);
    Tensor &lse2 = zeros({N}, DType::f32), &dx = zeros({N, C}), &dwl = zeros({V, C}, DType::f32);
    const double ce_f = 2.0 * N * V * C * 1e-9;
    add(
        "lm_head_ce_forward", [&] { k::lm_head_ce_forward(lse2, &count_, x, wl, tg); }, ce_f);
    add(
        "lm_head_ce_backward",
        [&] { k::lm_head_ce_backward(&dx, &dwl, x, wl, tg, lse2, 1.0f / N); }, 3 * ce_f);
    add(
        "lm_head_ce_forward_backward",
        [&] { k::lm_head_ce_forward_backward(lse2, &count_, &dx, &dwl, x, wl, tg, 1.0f / N); },
        3 * ce_f);

    Tensor &w1 = rnd({H, C}, 0.02f), &b1 = rnd({H}), &h = zeros({N, H}), &dh = rnd({N, H});
    Tensor &dw1 = zeros({H, C}, DType::f32), &db1 = zeros({H}, DType::f32);
    const double fc_f = 2.0 * N * H * C * 1e-9;
    add(
        "linear_forward fc", [&] { k::linear_forward(h, x, w1, &b1); }, fc_f);
    add(
        "linear_backward fc", [&] { k::linear_backward(&dx, &dw1, &db1, dh, x, w1); }, 2 * fc_f);

    Tensor &lw = rnd({C}), &lb = rnd({C}), &ln = zeros({N, C});
    Tensor &mean = zeros({N}, DType::f32), &rstd = zeros({N}, DType::f32);
    Tensor &dlw = zeros({C}, DType::f32), &dlb = zeros({C}, DType::f32);
    add("layernorm_forward", [&] { k::layernorm_forward(ln, mean, rstd, x, lw, lb, 1e-5f); });
    add("layernorm_backward",
        [&] { k::layernorm_backward(&dx, &dlw, &dlb, ln, x, lw, mean, rstd); });
    add("rmsnorm_forward", [&] { k::rmsnorm_forward(ln, rstd, x, lw, 1e-5f); });
    add("rmsnorm_backward", [&] { k::rmsnorm_backward(&dx, &dlw, ln, x, lw, rstd); });
    Tensor &g = zeros({N, H}), &dg = zeros({N, H}), &du = zeros({N, H});
    add("gelu_forward", [&] { k::gelu_forward(g, h); });
    add("gelu_backward", [&] { k::gelu_backward(dg, dh, h); });
    add("swiglu_forward", [&] { k::swiglu_forward(g, h, dh); });
    add("swiglu_backward", [&] { k::swiglu_backward(&dg, &du, dh, h, dh); });
    add("rope_forward", [&] { k::rope_forward(out, q, 10000.0f); });
    add("rope_backward", [&] { k::rope_backward(dq, q, 10000.0f); });
    Tensor &qkv = rnd({N, 3 * C}), &qc = zeros({N, C});
    add("copy_columns", [&] { k::copy_columns(qc, qkv, C); });
    add("add_columns", [&] { k::add_columns(qkv, qc, C); });
    Tensor &r1 = rnd({N, C}), &r2 = rnd({N, C}), &r3 = zeros({N, C});
    add("add_forward", [&] { k::add_forward(r3, r1, r2); });
    add("axpy", [&] { k::axpy(r3, r1, 1e-3f); });
    add("scale", [&] { k::scale(r3, 0.999f); });
    add("sum_squares", [&] { k::sum_squares(r1); });
    add("max_abs", [&] { k::max_abs(r1); });
    Tensor &tok = ids({B, T}, V), &wpe = rnd({1024, C}), &emb = zeros({B, T, C});
    Tensor &dwte = zeros({V, C}, DType::f32), &dwpe = zeros({1024, C}, DType::f32);
    add("embedding_forward", [&] { k::embedding_forward(emb, tok, wl, &wpe); });
    add("embedding_backward", [&] { k::embedding_backward(&dwte, &dwpe, emb, tok); });

    Tensor &gx = rnd({P}, 1e-3f), &gy = rnd({P}, 1e-3f), &go = zeros({P});
    add("add_forward (14M)", [&] { k::add_forward(go, gx, gy); });
    add("axpy (14M)", [&] { k::axpy(gy, gx, 1e-3f); });
    add("scale (14M)", [&] { k::scale(gy, 0.999f); });
    add("sum_squares (14M)", [&] { k::sum_squares(gx); });
    add("max_abs (14M)", [&] { k::max_abs(gx); });
    Tensor &p32 = rnd({P}, 1.0f, DType::f32), &m = zeros({P}, DType::f32);
    Tensor& vv = zeros({P}, DType::f32);
    add("cast to f32 (14M)", [&] { k::cast(p32, gx); });
    add("cast from f32 (14M)", [&] { k::cast(go, p32); });
    add("adamw_step (14M)",
        [&] { k::adamw_step(p32, gx, m, vv, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, ++step_); });
  }

  const std::vector<Op>& ops() const { return ops_; }

 private:
  Tensor& keep(Tensor t) { return *tensors_.emplace_back(std::make_unique<Tensor>(std::move(t))); }
  Tensor& rnd(const Shape& s, float sd = 1.0f) { return rnd(s, sd, dt_); }
  Tensor& rnd(const Shape& s, float sd, DType dt) { return keep(Tensor::randn(s, rng_, sd, dt)); }
  Tensor& zeros(const Shape& s) { return keep(Tensor::zeros(s, dt_)); }
  Tensor& zeros(const Shape& s, DType dt) { return keep(Tensor::zeros(s, dt)); }
  Tensor& ids(const Shape& s, int64_t vocab) {
    Tensor& t = keep(Tensor::empty(s, DType::i32));
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data<int32_t>()[i] = static_cast<int32_t>(rng_.below(vocab));
    return t;
  }
  void add(const char* name, std::function<void()> fn, double gflop = 0) {
    const char* only = std::getenv("BRAID_BENCH_ONLY");
    if (only && !std::string(name).starts_with(only)) return;
    ops_.push_back({name, std::move(fn), gflop});
  }

  DType dt_;
  Rng rng_{7};
  std::vector<std::unique_ptr<Tensor>> tensors_;
  std::vector<Op> ops_;
  int64_t count_ = 0, step_ = 0;
};

// One dtype: each kernel back to back, best of reps (after one warm-up call).
void run_one(DType dt, int reps) {
  std::printf("kernels_bench: %s, %d threads, GEMM %s, best of %d\n",
              std::string(dtype_name(dt)).c_str(), omp_get_max_threads(), k::gemm_backend_name(),
              reps);
  Workload w(dt);
  for (const Op& op : w.ops()) {
    op.run();
    double best = 1e30;
    for (int r = 0; r < reps; ++r) best = std::min(best, time_ms(op.run));
    if (op.gflop > 0)
      std::printf("%-28s %9.3f ms  %7.1f GFLOP/s\n", op.name.c_str(), best, op.gflop / best * 1e3);
    else
      std::printf("%-28s %9.3f ms\n", op.name.c_str(), best);
  }
}

// Note [Interleaved rounds]: neighbours on a shared machine come and go within seconds, so
// timing all of f32 and then all of bf16 compares two different machines. Each round runs
// every kernel three times back to back in f32, then bf16, then f16 (warm caches, as
// run_one), and each keeps its best over all rounds: a quiet moment counts for all three.
void run_all(int rounds) {
  std::printf("kernels_bench: f32 / bf16 / f16, %d threads, GEMM %s, best of %d rounds\n",
              omp_get_max_threads(), k::gemm_backend_name(), rounds);
  const DType dts[3] = {DType::f32, DType::bf16, DType::f16};
  std::vector<std::unique_ptr<Workload>> w;
  for (DType dt : dts) w.push_back(std::make_unique<Workload>(dt));
  const size_t n = w[0]->ops().size();
  std::vector<std::array<double, 3>> best(n, {1e30, 1e30, 1e30});
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < n; ++i)
      for (int d = 0; d < 3; ++d)
        for (int b = 0; b < 3; ++b) best[i][d] = std::min(best[i][d], time_ms(w[d]->ops()[i].run));
  std::printf("%-28s %9s %9s %9s %9s %8s\n", "kernel (ms)", "f32", "bf16", "f16", "bf16/f32",
              "f16/f32");
  for (size_t i = 0; i < n; ++i)
    std::printf("%-28s %9.3f %9.3f %9.3f %9.2f %8.2f\n", w[0]->ops()[i].name.c_str(), best[i][0],
                best[i][1], best[i][2], best[i][1] / best[i][0], best[i][2] / best[i][0]);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 5;
  const std::string mode = argc > 2 ? argv[2] : "f32";
  if (mode == "all") {
    run_all(reps);
  } else {
    run_one(dtype_from_name(mode), reps);
  }
  return 0;
}
