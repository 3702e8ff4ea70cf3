#include "braid/parallel/cost/calibrate.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <ctime>
#include <functional>
#include <thread>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/core/tensor.h"
#include "braid/kernels/op_profile.h"
#include "braid/kernels/ops.h"
#include "braid/nn/transformer.h"
#include "braid/parallel/cost/step_cost.h"

namespace braid::parallel::cost {

namespace k = braid::kernels;

namespace {

using Clock = std::chrono::steady_clock;

int64_t node_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? int64_t(pages) * page : 0;
}

// What one rank measures (Note [Calibration]); every rank runs the same list, so the ranks
// stay in step at the barrier before each measurement.
class RankMeasure {
 public:
  RankMeasure(std::barrier<>& sync, int reps) : sync_(sync), reps_(reps) {}

  void sync() { sync_.arrive_and_wait(); }
  int reps() const { return reps_; }

  // Seconds per call while every rank runs fn: from the barrier all start at to the one after
  // the slowest finished (oversubscribed ranks share the cores, whoever runs first).
  // The best of three such rounds: a rank's neighbours on a shared machine only slow it.
  double time(const std::function<void()>& fn) {
    fn();
    double best = INFINITY;
    for (int round = 0; round < 3; ++round) {
      sync_.arrive_and_wait();
      const auto t0 = Clock::now();
      for (int i = 0; i < reps_; ++i) fn();
      sync_.arrive_and_wait();
      best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count() / reps_);
    }
    return best;
  }

 private:
  std::barrier<>& sync_;
  int reps_;
};

constexpr int64_t kRows = 1024;
const int64_t kGemmShapes[][2] = {{128, 128}, {256, 256}, {512, 512}, {1024, 1024}, {384, 1536}};

// The forward and backward products of a linear layer [rows, in] -> [rows, out].
double linear_seconds(RankMeasure& m, DType dt, int64_t in, int64_t out, Rng& rng) {
  Tensor x = Tensor::randn({kRows, in}, rng, 1.0f, dt), w = Tensor::randn({out, in}, rng, 1.0f, dt);
  Tensor y = Tensor::empty({kRows, out}, dt), dy = Tensor::randn({kRows, out}, rng, 1.0f, dt);
  Tensor dx = Tensor::empty({kRows, in}, dt), dw = Tensor::empty({out, in}, dt);
  return m.time([&] {
    k::matmul(y, x, w, false, true);
    k::matmul(dx, dy, w, false, false);
    k::matmul(dw, dy, x, true, false);
  });
}

struct AttentionTimes {
  double fwd = 0, bwd = 0;
};

AttentionTimes attention_seconds(RankMeasure& m, DType dt, int64_t T, Rng& rng) {
  const int64_t nh = 8, hs = 64;
  Tensor q = Tensor::randn({1, T, nh, hs}, rng, 1.0f, dt);
  Tensor kk = Tensor::randn({1, T, nh, hs}, rng, 1.0f, dt);
  Tensor v = Tensor::randn({1, T, nh, hs}, rng, 1.0f, dt);
  Tensor out = Tensor::empty({1, T, nh, hs}, dt), lse = Tensor::empty({1, nh, T}, DType::f32);
  Tensor dq = Tensor::zeros({1, T, nh, hs}, dt), dk = Tensor::zeros({1, T, nh, hs}, dt);
  Tensor dv = Tensor::zeros({1, T, nh, hs}, dt);
  AttentionTimes t;
  t.fwd = m.time([&] { k::attention_forward(out, lse, q, kk, v); });
  t.bwd = m.time([&] { k::attention_backward(&dq, &dk, &dv, out, q, kk, v, out, lse); });
  return t;
}

// Per-element times of the memory-bound op classes (op_bytes()), in the compute dtype.
void elementwise_ns(RankMeasure& m, DType dt, const std::string& suffix, Rng& rng,
                    std::map<std::string, double>& ns) {
  const int64_t N = 2048, C = 512, H = 4 * C;
  const double nc = double(N) * C, nh = double(N) * H;
  Tensor x = Tensor::randn({N, C}, rng, 1.0f, dt), dout = Tensor::randn({N, C}, rng, 1.0f, dt);
  Tensor y = Tensor::empty({N, C}, dt), dx = Tensor::zeros({N, C}, dt);
  Tensor wgt = Tensor::randn({C}, rng, 1.0f, dt), bias = Tensor::randn({C}, rng, 1.0f, dt);
  Tensor dw = Tensor::zeros({C}, DType::f32), db = Tensor::zeros({C}, DType::f32);
  Tensor mean = Tensor::empty({N}, DType::f32), rstd = Tensor::empty({N}, DType::f32);
  ns["layernorm_fwd" + suffix] =
      m.time([&] { k::layernorm_forward(y, mean, rstd, x, wgt, bias, 1e-5f); }) * 1e9 / nc;
  ns["layernorm_bwd" + suffix] =
      m.time([&] { k::layernorm_backward(&dx, &dw, &db, dout, x, wgt, mean, rstd); }) * 1e9 / nc;
  ns["rmsnorm_fwd" + suffix] =
      m.time([&] { k::rmsnorm_forward(y, rstd, x, wgt, 1e-5f); }) * 1e9 / nc;
  ns["rmsnorm_bwd" + suffix] =
      m.time([&] { k::rmsnorm_backward(&dx, &dw, dout, x, wgt, rstd); }) * 1e9 / nc;
  ns["add" + suffix] = m.time([&] { k::add_forward(y, x, dout); }) * 1e9 / nc;
  ns["axpy" + suffix] = m.time([&] { k::axpy(dx, dout, 1.0f); }) * 1e9 / nc;
  {
    // GPT-2's qkv split: a third of a [N, 3C] tensor's columns per copy.
    Tensor qkv = Tensor::randn({N, 3 * C}, rng, 1.0f, dt);
    ns["copy" + suffix] = m.time([&] { k::copy_columns(y, qkv, C); }) * 1e9 / nc;
    ns["add_columns" + suffix] = m.time([&] { k::add_columns(qkv, dout, C); }) * 1e9 / nc;
  }
  {
    Tensor h = Tensor::randn({N, H}, rng, 1.0f, dt), hy = Tensor::empty({N, H}, dt);
    Tensor dh = Tensor::randn({N, H}, rng, 1.0f, dt), hdx = Tensor::zeros({N, H}, dt);
    Tensor up = Tensor::randn({N, H}, rng, 1.0f, dt), dup = Tensor::zeros({N, H}, dt);
    ns["gelu_fwd" + suffix] = m.time([&] { k::gelu_forward(hy, h); }) * 1e9 / nh;
    ns["gelu_bwd" + suffix] = m.time([&] { k::gelu_backward(hdx, dh, h); }) * 1e9 / nh;
    ns["swiglu_fwd" + suffix] = m.time([&] { k::swiglu_forward(hy, h, up); }) * 1e9 / nh;
    ns["swiglu_bwd" + suffix] =
        m.time([&] { k::swiglu_backward(&hdx, &dup, dh, h, up); }) * 1e9 / nh;
  }
  {
    Tensor r = Tensor::randn({1, N, C / 64, 64}, rng, 1.0f, dt), ro = Tensor::empty(r.shape(), dt);
    ns["rope_fwd" + suffix] = m.time([&] { k::rope_forward(ro, r, 10000.0f); }) * 1e9 / nc;
    ns["rope_bwd" + suffix] = m.time([&] { k::rope_backward(ro, r, 10000.0f); }) * 1e9 / nc;
  }
  {
    const int64_t V = 8192;
    std::vector<int32_t> id(N);
    for (auto& i : id) i = static_cast<int32_t>(rng.next_u64() % V);
    Tensor ids = Tensor::from_vector(id, {1, N});
    Tensor wte = Tensor::randn({V, C}, rng, 1.0f, dt), dwte = Tensor::zeros({V, C}, DType::f32);
    Tensor e = Tensor::empty({1, N, C}, dt), de = Tensor::randn({1, N, C}, rng, 1.0f, dt);
    ns["embedding_fwd" + suffix] =
        m.time([&] { k::embedding_forward(e, ids, wte, nullptr); }) * 1e9 / nc;
    ns["embedding_bwd" + suffix] =
        m.time([&] { k::embedding_backward(&dwte, nullptr, de, ids); }) * 1e9 / nc;
  }
}

// The LM head + loss's time beyond its products, per logit (Note [LM head cost]): the
// forward's one product and the backward's three (the logits again, then dx and dweight).
void ce_ns(RankMeasure& m, DType dt, const ComputeRates& r, Rng& rng, const std::string& suffix,
           std::map<std::string, double>& ns) {
  const int64_t N = 1024, C = 384, V = 8192;
  Tensor x = Tensor::randn({N, C}, rng, 0.1f, dt), w = Tensor::randn({V, C}, rng, 0.1f, dt);
  std::vector<int32_t> tg(N);
  for (auto& t : tg) t = static_cast<int32_t>(rng.next_u64() % V);
  Tensor targets = Tensor::from_vector(tg, {N});
  Tensor lse = Tensor::empty({N}, DType::f32), dx = Tensor::zeros({N, C}, dt);
  Tensor dw = Tensor::zeros({V, C}, DType::f32);
  int64_t count = 0;
  const double fwd = m.time([&] { k::lm_head_ce_forward(lse, &count, x, w, targets); });
  const double bwd = m.time([&] { k::lm_head_ce_backward(&dx, &dw, x, w, targets, lse, 1e-3f); });
  const double dmin = double(C);
  const double gemm = 2.0 * N * V * C * (dmin + r.gemm_half_dim) / (dmin * r.gemm_gflops(dt) * 1e9);
  ns["ce_fwd" + suffix] = std::max(0.0, fwd - gemm) * 1e9 / (double(N) * V);
  ns["ce_bwd" + suffix] = std::max(0.0, bwd - 3 * gemm) * 1e9 / (double(N) * V);
}

// f32 optimizer-side classes, and the streaming bandwidth.
void state_ns(RankMeasure& m, Rng& rng, ComputeRates& r) {
  const int64_t n = int64_t{4} << 20;
  Tensor p = Tensor::randn({n}, rng), g = Tensor::randn({n}, rng), m1 = Tensor::zeros({n});
  Tensor v = Tensor::zeros({n}), low = Tensor::empty({n}, DType::bf16);
  int64_t step = 0;
  r.elementwise_ns["adamw"] = m.time([&] {
    k::adamw_step(p, g, m1, v, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++step);
  }) * 1e9 / double(n);
  r.elementwise_ns["cast"] = m.time([&] { k::cast(low, p); }) * 1e9 / double(n);
  // The gradient norm is exact (fixed point, Note [Exact norm]) after a max for its shift.
  r.elementwise_ns["sum_squares"] =
      m.time([&] { (void)k::sum_squares_fixed(g, 20); }) * 1e9 / double(n);
  r.elementwise_ns["max_abs"] = m.time([&] { (void)k::max_abs(g); }) * 1e9 / double(n);
  r.elementwise_ns["zero"] = m.time([&] { k::scale(m1, 0.0f); }) * 1e9 / double(n);
  const int64_t big = int64_t{16} << 20;
  Tensor a = Tensor::randn({big}, rng), b = Tensor::randn({big}, rng), c = Tensor::empty({big});
  r.stream_gbs = 12.0 * double(big) / m.time([&] { k::add_forward(c, a, b); }) / 1e9;
  Tensor tiny = Tensor::zeros({16}), tiny_out = Tensor::empty({16});
  r.op_overhead_us = m.time([&] {
    for (int i = 0; i < 2000; ++i) k::add_forward(tiny_out, tiny, tiny);
  }) * 1e6 / 2000;
}

// Note [Framework cost] (stage_work.cpp): a real training step of a small GPT-2 (2 blocks,
// d 384, 4 x 256 tokens), less its kernels' time (op profiling), per element of the buffers its
// blocks make. Rank 0 alone runs it, with its threads, while the others wait: ranks as threads
// of one process would contend for the process's allocator and page tables, which ranks as
// processes do not share. Every rank reports rank 0's figure.
double framework_ns(RankMeasure& m, int rank) {
  double ns = 0;
  m.sync();
  if (rank == 0) {
    nn::ModelConfig mc = nn::ModelConfig::preset("bench-small");
    mc.n_layer = 2;
    nn::Transformer model(mc);
    const int64_t B = 4, T = 256;
    Rng rng(7);
    std::vector<int32_t> ids(B * T), tg(B * T);
    for (auto& x : ids) x = static_cast<int32_t>(rng.next_u64() % mc.vocab_size);
    for (auto& x : tg) x = static_cast<int32_t>(rng.next_u64() % mc.vocab_size);
    const Tensor inputs = Tensor::from_vector(ids, {B, T});
    const Tensor targets = Tensor::from_vector(tg, {B, T});
    auto step = [&] {
      model.zero_grad();
      model.loss(inputs, targets).backward();
    };
    step();
    double best = INFINITY;
    for (int round = 0; round < 3; ++round) {
      kernels::reset_op_totals();
      kernels::set_op_profiling(true);
      const auto t0 = Clock::now();
      for (int i = 0; i < m.reps(); ++i) step();
      const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
      kernels::set_op_profiling(false);
      double kernel_s = 0;
      for (const auto& t : kernels::op_totals()) kernel_s += t.seconds;
      best = std::min(best, std::max(0.0, wall - kernel_s) / m.reps());
    }
    const double d = double(mc.d_model), h = double(mc.d_ff);
    ns = best * 1e9 / (double(mc.n_layer) * fresh_elements(d, 3 * d, h, h, double(B * T)));
  }
  m.sync();
  return ns;
}

// Everything one rank measures, as a flat list (averaged over the ranks afterwards).
ComputeRates measure_rank(RankMeasure& m, int threads, int rank, uint64_t seed) {
  omp_set_num_threads(threads);
  Rng rng(seed);
  ComputeRates r;
  for (DType dt : {DType::f32, DType::bf16}) {
    std::vector<double> flops, dmin, secs;
    for (const auto& [in, out] : kGemmShapes) {
      flops.push_back(3 * 2.0 * kRows * in * out);
      dmin.push_back(double(std::min({kRows, in, out})));
      secs.push_back(linear_seconds(m, dt, in, out, rng));
    }
    double rate = 0, half = 0;
    fit_gemm(flops, dmin, secs, rate, half);
    (dt == DType::f32 ? r.gemm_gflops_f32 : r.gemm_gflops_bf16) = rate;
    if (dt == DType::f32) r.gemm_half_dim = half;
  }
  // a T^2 hs + c T hs per (sequence, head), from T = 128 and 512.
  const double hs = 64, heads = 8, t1 = 128, t2 = 512;
  auto fit = [&](double s1, double s2, double& a, double& c) {
    const double y1 = s1 * 1e9 / (heads * t1 * hs), y2 = s2 * 1e9 / (heads * t2 * hs);
    a = std::max(0.0, (y2 - y1) / (t2 - t1));
    c = std::max(0.0, y1 - a * t1);
  };
  const AttentionTimes f1 = attention_seconds(m, DType::f32, 128, rng);
  const AttentionTimes f2 = attention_seconds(m, DType::f32, 512, rng);
  fit(f1.fwd, f2.fwd, r.attn_fwd_a_ns, r.attn_fwd_c_ns);
  fit(f1.bwd, f2.bwd, r.attn_bwd_a_ns, r.attn_bwd_c_ns);
  const AttentionTimes b2 = attention_seconds(m, DType::bf16, 512, rng);
  r.attn_bf16_factor = (b2.fwd + b2.bwd) / (f2.fwd + f2.bwd);
  elementwise_ns(m, DType::f32, "", rng, r.elementwise_ns);
  elementwise_ns(m, DType::bf16, ".bf16", rng, r.elementwise_ns);
  ce_ns(m, DType::f32, r, rng, "", r.elementwise_ns);
  ce_ns(m, DType::bf16, r, rng, ".bf16", r.elementwise_ns);
  state_ns(m, rng, r);
  r.elementwise_ns["alloc"] = framework_ns(m, rank);
  return r;
}

// The ranks' rates, averaged (Note [Calibration]).
ComputeRates measure_compute(int ranks, int cores, int reps) {
  const int threads = std::max(1, cores / ranks);
  std::barrier<> sync(ranks);
  std::vector<ComputeRates> each(ranks);
  run_rank_threads(
      ranks,
      [&](int i) {
        RankMeasure m(sync, reps);
        each[i] = measure_rank(m, threads, i, 1234 + i);
      },
      [&] { sync.arrive_and_drop(); });
  ComputeRates avg = each[0];
  auto mean = [&](auto field) {
    double s = 0;
    for (const auto& r : each) s += r.*field;
    avg.*field = s / ranks;
  };
  mean(&ComputeRates::gemm_gflops_f32);
  mean(&ComputeRates::gemm_gflops_bf16);
  mean(&ComputeRates::gemm_half_dim);
  mean(&ComputeRates::attn_fwd_a_ns);
  mean(&ComputeRates::attn_fwd_c_ns);
  mean(&ComputeRates::attn_bwd_a_ns);
  mean(&ComputeRates::attn_bwd_c_ns);
  mean(&ComputeRates::attn_bf16_factor);
  mean(&ComputeRates::stream_gbs);
  mean(&ComputeRates::op_overhead_us);
  for (auto& [key, ns] : avg.elementwise_ns) {
    double s = 0;
    for (const auto& r : each) s += r.elementwise_ns.at(key);
    ns = s / ranks;
  }
  avg.elementwise_ns["alloc"] = each[0].elementwise_ns.at("alloc");  // rank 0's alone
  avg.ranks = ranks;
  avg.threads = threads;
  return avg;
}

}  // namespace

void fit_gemm(const std::vector<double>& flops, const std::vector<double>& min_dim,
              const std::vector<double>& seconds, double& gflops, double& half_dim) {
  double best = INFINITY;
  for (double h = 0; h <= 1024; h += 4) {
    // With u_i = flops_i (d_i + h) / (d_i t_i), the rate R minimising sum (1 - u_i / R)^2 has
    // 1 / R = sum u / sum u^2.
    double su = 0, suu = 0;
    std::vector<double> u(flops.size());
    for (size_t i = 0; i < flops.size(); ++i) {
      u[i] = flops[i] * (min_dim[i] + h) / (min_dim[i] * seconds[i]);
      su += u[i];
      suu += u[i] * u[i];
    }
    const double inv = su / suu;
    double err = 0;
    for (double ui : u) err += (1 - ui * inv) * (1 - ui * inv);
    if (err < best) {
      best = err;
      gflops = 1 / inv / 1e9;
      half_dim = h;
    }
  }
}

MachineProfile calibrate(const CalibrateOptions& options) {
  MachineProfile p;
  p.name = "this machine";
  p.device = "cpu";
  p.cpu = cpu_model_name();
  p.cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  p.node_memory = node_memory_bytes();
  // Ranks as threads of one process time-slice differently from oversubscribed processes (whose
  // OpenMP teams spin and yield on their own): beyond the cores a rank's rates are its share of
  // the cores' (compute_at()), which is what processes get.
  std::vector<int> ranks = options.ranks;
  if (ranks.empty()) {
    for (int r : {1, 2, 4, 8}) {
      if (r <= p.cores) ranks.push_back(r);
    }
  }
  std::vector<int> sizes = options.group_sizes;
  if (sizes.empty()) sizes = {2, 4};
  for (int r : ranks) {
    BRAID_CHECK(r >= 1 && r <= 256, "calibrate: ranks per node must be in [1, 256], got ", r);
    if (options.log) {
      options.log("compute with " + std::to_string(r) + " rank(s) x " +
                  std::to_string(std::max(1, p.cores / r)) + " thread(s)");
    }
    p.compute.push_back(measure_compute(r, p.cores, options.reps));
  }
  std::sort(p.compute.begin(), p.compute.end(),
            [](const ComputeRates& a, const ComputeRates& b) { return a.ranks < b.ranks; });
  p.node = measure_node_collectives(sizes, p.cores, options.reps, options.log);
  if (!options.disk_dir.empty()) {
    if (options.log) options.log("disk in " + options.disk_dir);
    measure_disk(options.disk_dir, p);
  }
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  p.calibrated_at = date;
  p.validate();
  return p;
}

}  // namespace braid::parallel::cost
