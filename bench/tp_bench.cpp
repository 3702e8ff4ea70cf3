#include "bench/tp_bench.h"

#include <chrono>

#include "braid/autograd/variable.h"
#include "braid/core/rng.h"
#include "braid/nn/transformer.h"
#include "braid/parallel/tensor/tp_group.h"

namespace braid::bench {

namespace {

struct Traffic {
  int64_t collectives = 0;
  int64_t bytes = 0;
};

// Note [Megatron formula]: per micro-step of b x s tokens, hidden h, L blocks, 4-byte elements
// (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", 4.2):
// each block runs two all-reduces of b*s*h forward (after attention and after the MLP) and two
// backward (the gradients of their inputs); sequence parallelism replaces each all-reduce by an
// all-gather and a reduce-scatter of the same tensor, so the collectives double and the bytes
// each rank sends (Note [Bus bytes]) stay. Around the blocks braid adds: the
// vocab-parallel embedding's sum (all-reduce, or reduce-scatter + its backward all-gather), the
// LM head's input (its gradient all-reduced, or all-gather + backward reduce-scatter), the
// vocab-parallel cross-entropy's two small all-reduces (row max [b*s], then sum of exponentials
// and target logit [2*b*s]), and with sequence parallelism one all-reduce of each replicated
// parameter's gradient (norms; GPT-2's row-parallel biases and position table).
Traffic megatron_formula(const nn::ModelConfig& c, int64_t b, int64_t s, bool sp, int t) {
  // Bytes each rank sends (Note [Bus bytes], parallel/tensor/tp_group.cpp).
  auto all_reduce = [t](int64_t bytes) { return 2 * (bytes * (t - 1) / t); };
  auto half = [t](int64_t bytes) { return bytes * (t - 1) / t; };  // all-gather, reduce-scatter
  const int64_t act = b * s * c.d_model * 4, L = c.n_layer, regions = 4 * L + 2;
  Traffic r;
  r.collectives = regions * (sp ? 2 : 1) + 2;
  r.bytes = regions * (sp ? 2 * half(act) : all_reduce(act)) + all_reduce(b * s * 4) +
            all_reduce(2 * b * s * 4);
  if (sp) {
    const int64_t C = c.d_model;
    // Per block: GPT-2 ln_1 (w, b), ln_2 (w, b), attn.c_proj.bias, mlp.c_proj.bias; LLaMA the
    // two RMSNorm weights. Then the final norm, and GPT-2's position table.
    const int64_t replicated = (c.is_gpt2() ? 6 : 2) * L + (c.is_gpt2() ? 2 : 1);
    r.collectives += replicated + (c.is_gpt2() ? 1 : 0);
    r.bytes +=
        replicated * all_reduce(C * 4) + (c.is_gpt2() ? all_reduce(c.max_seq_len * C * 4) : 0);
  }
  return r;
}

}  // namespace

bool run_tp_bench(std::shared_ptr<comm::ProcessGroup> world, const TpBenchOptions& o, FILE* out) {
  const nn::ModelConfig cfg = nn::ModelConfig::preset(o.preset);
  parallel::TpGroup tp(world, o.sequence_parallel);
  nn::TransformerOptions to;
  to.seed = 1;
  to.tensor_parallel = &tp;
  nn::Transformer model(cfg, to);
  Tensor ids = Tensor::empty(Shape{o.batch, o.seq_len}, DType::i32);
  Tensor targets = Tensor::empty(Shape{o.batch, o.seq_len}, DType::i32);
  Rng rng(3);
  for (int64_t i = 0; i < ids.numel(); ++i) {
    ids.data<int32_t>()[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(cfg.vocab_size)));
    targets.data<int32_t>()[i] =
        static_cast<int32_t>(rng.below(static_cast<uint64_t>(cfg.vocab_size)));
  }
  double step_ms = 0;
  for (int k = 0; k <= o.steps; ++k) {
    if (k == 1) tp.reset_stats();  // the first micro-step warms up
    world->barrier()->wait();
    const auto t0 = std::chrono::steady_clock::now();
    model.zero_grad();
    model.loss(ids, targets).backward();
    if (k > 0)
      step_ms +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  const parallel::TpCommStats s = tp.stats();
  const Traffic want =
      megatron_formula(cfg, o.batch, o.seq_len, o.sequence_parallel, world->size());
  const int64_t got_n = s.collectives / o.steps, got_b = s.bytes / o.steps;
  const bool ok = got_n == want.collectives && got_b == want.bytes &&
                  s.collectives % o.steps == 0 && s.bytes % o.steps == 0;
  if (world->rank() == 0) {
    std::fprintf(out, "tp bench: %s, tp=%d%s, micro-batch %lld x %lld tokens, f32\n",
                 o.preset.c_str(), world->size(), o.sequence_parallel ? ", sequence parallel" : "",
                 static_cast<long long>(o.batch), static_cast<long long>(o.seq_len));
    std::fprintf(out, "%-28s %14s %16s\n", "per micro-step", "collectives", "bytes");
    std::fprintf(out, "%-28s %14lld %16lld\n", "measured (tp group)", static_cast<long long>(got_n),
                 static_cast<long long>(got_b));
    std::fprintf(out, "%-28s %14lld %16lld\n", "Megatron formula",
                 static_cast<long long>(want.collectives), static_cast<long long>(want.bytes));
    std::fprintf(out, "%s; step %.1f ms, waiting for tp collectives %.1f ms (%.0f%%)\n",
                 ok ? "measured = formula" : "MISMATCH", step_ms / o.steps, s.wait_ms / o.steps,
                 100.0 * s.wait_ms / step_ms);
  }
  return ok;
}

}  // namespace braid::bench
