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
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "braid/core/device_backend.h"
#include "braid/core/memory_tracker.h"
#include "braid/core/rng.h"
#include "braid/kernels/cuda/allocator.h"
#include "braid/kernels/cuda/gemm.h"
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

// --gemm-probe: TFLOP/s of the LM head's GEMM shapes (rows x vocab x C) with the vocabulary as
// is and padded to a multiple of 64, f32 and bf16 outputs: what the cross-entropy kernels choose
// between.
void gemm_probe(Device gpu) {
  const int64_t R = 1335, C = 768;
  Rng rng(2);
  for (int64_t V : {int64_t{50257}, int64_t{50304}}) {
    Tensor x = Tensor::randn(Shape{R, C}, rng, 1.0f, DType::bf16).to(gpu);
    Tensor w = Tensor::randn(Shape{V, C}, rng, 0.02f, DType::bf16).to(gpu);
    const int64_t ldl = (V + 7) / 8 * 8;
    for (DType out : {DType::f32, DType::bf16}) {
      Tensor logits = Tensor::empty(Shape{R, ldl}, out, MemCategory::other, nullptr, gpu);
      Tensor dx = Tensor::empty(Shape{R, C}, DType::bf16, MemCategory::other, nullptr, gpu);
      Tensor dl = Tensor::zeros(Shape{R, ldl}, DType::bf16).to(gpu);
      auto time = [&](const char* what, auto&& fn) {
        double best = 1e30;
        for (int i = 0; i < 8; ++i) {
          require_device_backend(gpu).synchronize(gpu);
          auto t0 = Clock::now();
          fn();
          require_device_backend(gpu).synchronize(gpu);
          if (i >= 2) best = std::min(best, seconds_since(t0));
        }
        std::printf("gemm probe V=%lld out=%s %-22s %.3f ms %.0f TFLOP/s\n",
                    static_cast<long long>(V), std::string(dtype_name(out)).c_str(), what,
                    best * 1e3, 2.0 * R * V * C / best / 1e12);
      };
      kernels::cuda::GemmArgs g;
      g.ab = DType::bf16, g.c = out, g.a = x.device_data(), g.b = w.device_data();
      g.c_ptr = logits.device_data(), g.m = R, g.n = V, g.k = C, g.trans_b = true;
      g.lda = C, g.ldb = C, g.ldc = ldl;
      time("logits = x @ w^T", [&] { kernels::cuda::gemm(g); });
      kernels::cuda::GemmArgs d;
      d.ab = d.c = DType::bf16, d.a = dl.device_data(), d.b = w.device_data();
      d.c_ptr = dx.device_data(), d.m = R, d.n = C, d.k = V, d.lda = ldl, d.ldb = C, d.ldc = C;
      d.beta = 1.0f;
      if (out == DType::f32) time("dx += dl @ w", [&] { kernels::cuda::gemm(d); });
    }
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
    std::printf("step %2d loss %.4f norm %.3f %.1f ms %.0f tok/s\n", step, l, norm, dt * 1e3,
                tokens / dt);
  }
  const double tok_s = tokens * timed / total;
  const double mfu = tok_s * flops_per_token / (peak * 1e12);
  std::printf("braid: %.0f tokens/s, %.1f ms/step, MFU %.1f%% of the measured peak\n", tok_s,
              total / timed * 1e3, 100 * mfu);
  std::printf("device memory by category (peak): %s\n", tracker->breakdown().c_str());
  std::printf("allocator: %s\n", kernels::cuda::allocator_summary(0).c_str());
  std::printf("RESULT braid tokens_per_s=%.0f mfu=%.4f peak_tflops=%.1f max_in_use_bytes=%lld\n",
              tok_s, mfu, peak,
              static_cast<long long>(kernels::cuda::allocator_stats(0).peak_in_use));
  return 0;
}
