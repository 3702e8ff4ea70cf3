// gpu_train_bench: one GPU training a GPT-2/LLaMA preset with braid's own model, autograd and
// AdamW on the CUDA backend (kernels/cuda), printing tokens/s, MFU against the card's
// measured bf16 GEMM peak, and device memory per category. bench/gpu_vs_pytorch.sh runs it
// beside PyTorch eager and torch.compile on the same card (bench/gpu_train_torch.py).
//
//   gpu_train_bench [--model gpt2-small] [--batch 16] [--seq 1024] [--steps 20] [--warmup 3]
//                   [--dtype bf16] [--checkpoint none|full]
//
// FLOPs per token follow PaLM / nanoGPT / llm.c: 6 N + 12 L T C (N parameters; attention's
// two products forward and backward, not halved for the causal mask), so the MFU is comparable
// with bench/gpu_train_torch.py, which uses the same formula.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "braid/core/device_backend.h"
#include "braid/core/memory_tracker.h"
#include "braid/core/rng.h"
#include "braid/kernels/cuda/allocator.h"
#include "braid/kernels/cuda/gemm.h"
#include "braid/kernels/cuda/op_profile.h"
#include "braid/kernels/cuda/runtime.h"
#include "braid/kernels/ops.h"
#include "braid/nn/transformer.h"
#include "braid/optim/clip_grad.h"
#include "braid/optim/optimizer.h"
#include "braid/optim/param_groups.h"

namespace {

using namespace braid;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model = "gpt2-small";
  int64_t batch = 16, seq = 1024;
  int steps = 20, warmup = 3;
  DType dtype = DType::bf16;
  bool checkpoint = false;
  bool gemm_probe = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "gpu_train_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model")
      o.model = next();
    else if (a == "--batch")
      o.batch = std::stoll(next());
    else if (a == "--seq")
      o.seq = std::stoll(next());
    else if (a == "--steps")
      o.steps = std::stoi(next());
    else if (a == "--warmup")
      o.warmup = std::stoi(next());
    else if (a == "--dtype")
      o.dtype = dtype_from_name(next());
    else if (a == "--checkpoint")
      o.checkpoint = next() == "full";
    else if (a == "--gemm-probe")
      o.gemm_probe = true;
    else {
      std::fprintf(stderr, "gpu_train_bench: unknown argument %s\n", a.c_str());
      std::exit(2);
    }
  }
  return o;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// --gemm-probe: TFLOP/s of the GEMM shapes of GPT-2 124M's step at batch 16 x 1024: the LM
// head's three per chunk (rows x padded vocabulary x C, logits in f32 or bf16) at the chunk
// sizes the cross-entropy kernels could choose, and the blocks' linear layers. Random operands.
void gemm_probe(Device gpu) {
  const int64_t C = 768, V = 50304, N = 16384;
  Rng rng(2);
  auto time = [&](const std::string& what, double flops, auto&& fn) {
    double best = 1e30;
    for (int i = 0; i < 8; ++i) {
      require_device_backend(gpu).synchronize(gpu);
      auto t0 = Clock::now();
      fn();
      require_device_backend(gpu).synchronize(gpu);
      if (i >= 2) best = std::min(best, seconds_since(t0));
    }
    std::printf("gemm probe %-44s %8.3f ms %5.0f TFLOP/s\n", what.c_str(), best * 1e3,
                flops / best / 1e12);
  };
  // Random [r, c] bf16 on the GPU: 256 random rows made on the host, copied down the tensor
  // (host randn of the head's largest operands, 400M elements, took longer than the probe).
  auto bf16 = [&](int64_t r, int64_t c, float s) {
    const int64_t block = std::min<int64_t>(r, 256);
    Tensor rows = Tensor::randn(Shape{block, c}, rng, s, DType::bf16).to(gpu);
    Tensor out = Tensor::empty(Shape{r, c}, DType::bf16, MemCategory::other, nullptr, gpu);
    for (int64_t r0 = 0; r0 < r; r0 += block) {
      const int64_t n = std::min(block, r - r0) * c;
      Tensor dst = out.flat_range(r0 * c, n);
      dst.copy_(rows.flat_range(0, n));
    }
    return out;
  };
  auto f32 = [&](int64_t r, int64_t c) {
    Tensor t = Tensor::empty(Shape{r, c}, DType::f32, MemCategory::other, nullptr, gpu);
    t.zero_();
    return t;
  };
  using kernels::cuda::GemmArgs;
  auto run = [](DType ab, DType c, const Tensor& a, const Tensor& b, Tensor& out, int64_t m,
                int64_t n, int64_t k, bool ta, bool tb, float beta) {
    GemmArgs g;
    g.ab = ab, g.c = c, g.a = a.device_data(), g.b = b.device_data(), g.c_ptr = out.device_data();
    g.m = m, g.n = n, g.k = k, g.trans_a = ta, g.trans_b = tb, g.beta = beta;
    kernels::cuda::gemm(g);
  };
  Tensor w = bf16(V, C, 0.02f), dwacc = f32(V, C);
  for (int64_t R : {int64_t{2048}, int64_t{4096}, int64_t{5336}, int64_t{8192}}) {
    Tensor x = bf16(R, C, 1.0f), dl = bf16(R, V, 1e-4f), dx = bf16(R, C, 1.0f);
    const double f = 2.0 * R * V * C;
    const std::string at = "rows " + std::to_string(R) + ": ";
    Tensor lf = f32(R, V);
    time(at + "logits f32 = x @ w^T", f,
         [&] { run(DType::bf16, DType::f32, x, w, lf, R, V, C, false, true, 0.0f); });
    Tensor lb = bf16(R, V, 1.0f);
    time(at + "logits bf16 = x @ w^T", f,
         [&] { run(DType::bf16, DType::bf16, x, w, lb, R, V, C, false, true, 0.0f); });
    time(at + "dx bf16 += dl @ w", f,
         [&] { run(DType::bf16, DType::bf16, dl, w, dx, R, C, V, false, false, 1.0f); });
    time(at + "dw f32 += dl^T @ x", f,
         [&] { run(DType::bf16, DType::f32, dl, x, dwacc, V, C, R, true, false, 1.0f); });
  }
  // The blocks' linear layers over all N rows: forward, input gradient, weight gradient (f32).
  for (auto [in, out] :
       {std::pair<int64_t, int64_t>{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}}) {
    Tensor x = bf16(N, in, 1.0f), wt = bf16(out, in, 0.02f), y = bf16(N, out, 1.0f);
    Tensor dwt = f32(out, in);
    const double f = 2.0 * N * in * out;
    const std::string at = "linear " + std::to_string(in) + "->" + std::to_string(out) + ": ";
    time(at + "y = x @ w^T", f,
         [&] { run(DType::bf16, DType::bf16, x, wt, y, N, out, in, false, true, 0.0f); });
    time(at + "dx += dy @ w", f,
         [&] { run(DType::bf16, DType::bf16, y, wt, x, N, in, out, false, false, 1.0f); });
    time(at + "dw f32 += dy^T @ x", f,
         [&] { run(DType::bf16, DType::f32, y, x, dwt, out, in, N, true, false, 1.0f); });
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (!kernels::cuda::available()) {
    std::printf("gpu_train_bench: skipped, no CUDA device is visible\n");
    return 77;
  }
  const Device gpu{DeviceType::cuda, 0};
  const cudaDeviceProp& props = kernels::cuda::properties(0);
  std::printf("device: %s, %d SMs, %.1f GiB\n", props.name, props.multiProcessorCount,
              static_cast<double>(props.totalGlobalMem) / (1 << 30));
  const double peak = kernels::measure_gemm_peak_gflops(8192, DType::bf16, gpu) / 1e3;
  std::printf("measured bf16 GEMM peak (cuBLASLt 8192^3): %.1f TFLOP/s\n", peak);
  if (o.gemm_probe) {
    gemm_probe(gpu);
    return 0;
  }
  kernels::cuda::reset_peak(0);

  auto tracker = std::make_shared<MemoryTracker>("cuda:0");
  MemoryScope mem(tracker);
  DeviceScope on_gpu(gpu);

  nn::ModelConfig cfg = nn::ModelConfig::preset(o.model);
  cfg.max_seq_len = std::max(cfg.max_seq_len, o.seq);
  if (o.checkpoint) cfg.activation_checkpointing = true;
  nn::TransformerOptions topts;
  topts.materialize = false;
  nn::Transformer model(cfg, topts);
  model.materialize(true, nn::ParamLayout::kAlign, o.dtype, true);
  model.init_weights(1234);
  const int64_t n_params = model.num_parameters();

  std::vector<optim::ParamSlice> slices;
  for (const auto& e : model.flat().entries()) {
    if (!e.param->requires_grad) continue;
    slices.push_back(optim::ParamSlice::whole(
        e.name, model.flat().params().flat_range(e.range.offset, e.range.size).view(e.param->shape),
        model.flat().grads().flat_range(e.range.offset, e.range.size).view(e.param->shape)));
  }
  optim::AdamW opt(optim::split_decay_groups(slices, {}), 0.9f, 0.95f, 1e-8f);

  Rng rng(7);
  std::vector<int32_t> host_ids(static_cast<size_t>(o.batch * (o.seq + 1)));
  for (auto& t : host_ids) t = static_cast<int32_t>(rng.below(cfg.vocab_size));
  std::vector<int32_t> in(static_cast<size_t>(o.batch * o.seq)), tg(in.size());
  for (int64_t b = 0; b < o.batch; ++b) {
    for (int64_t t = 0; t < o.seq; ++t) {
      in[b * o.seq + t] = host_ids[b * (o.seq + 1) + t];
      tg[b * o.seq + t] = host_ids[b * (o.seq + 1) + t + 1];
    }
  }
  Tensor ids = Tensor::from_vector(in, Shape{o.batch, o.seq});
  Tensor targets = Tensor::from_vector(tg, Shape{o.batch, o.seq});

  std::vector<Tensor> grads;
  for (const auto& s : slices) grads.push_back(s.grad);
  // PaLM's estimate (as nanoGPT and llm.c): 6 N per token for the weights, 12 L T C for
  // attention's two products, forward and backward.
  const double flops_per_token =
      6.0 * static_cast<double>(n_params) + 12.0 * cfg.n_layer * o.seq * cfg.d_model;
  const double tokens = static_cast<double>(o.batch * o.seq);
  std::printf("model %s: %lld parameters, batch %lld x %lld tokens, %s, checkpointing %s\n",
              o.model.c_str(), static_cast<long long>(n_params), static_cast<long long>(o.batch),
              static_cast<long long>(o.seq), std::string(dtype_name(o.dtype)).c_str(),
              o.checkpoint ? "full" : "none");

  double total = 0;
  int timed = 0;
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    require_device_backend(gpu).synchronize(gpu);
    auto t0 = Clock::now();
    model.zero_grad();
    autograd::Variable loss = model.loss(ids, targets);
    loss.backward();
    const double norm = optim::clip_grad_norm(grads, 1.0);
    opt.step(3e-4f);
    model.flat().sync_compute();
    const float l = loss.value().item();  // synchronises
    const double dt = seconds_since(t0);
    if (step >= o.warmup) total += dt, ++timed;
    if (step + 1 == o.warmup) kernels::cuda::profile_reset();  // BRAID_CUDA_PROFILE: timed steps
    std::printf("step %2d loss %.4f norm %.3f %.1f ms %.0f tok/s\n", step, l, norm, dt * 1e3,
                tokens / dt);
  }
  const double tok_s = tokens * timed / total;
  const double mfu = tok_s * flops_per_token / (peak * 1e12);
  std::printf("braid: %.0f tokens/s, %.1f ms/step, MFU %.1f%% of the measured peak\n", tok_s,
              total / timed * 1e3, 100 * mfu);
  std::printf("device memory by category (peak): %s\n", tracker->breakdown().c_str());
  std::printf("allocator: %s\n", kernels::cuda::allocator_summary(0).c_str());
  std::fputs(kernels::cuda::profile_report(timed).c_str(), stdout);
  kernels::cuda::profile_reset();  // printed: nothing left for the report at exit
  std::printf("RESULT braid tokens_per_s=%.0f mfu=%.4f peak_tflops=%.1f max_in_use_bytes=%lld\n",
              tok_s, mfu, peak,
              static_cast<long long>(kernels::cuda::allocator_stats(0).peak_in_use));
  return 0;
}
