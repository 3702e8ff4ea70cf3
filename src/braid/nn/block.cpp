#include "braid/nn/block.h"

#include <cmath>

#include "braid/autograd/functions.h"
#include "braid/nn/layer_norm.h"
#include "braid/nn/rms_norm.h"

namespace braid::nn {

namespace {
std::unique_ptr<UnaryModule> make_norm(const ModelConfig& cfg, TensorParallel* tp) {
  const float eps = static_cast<float>(cfg.norm_eps);
  if (cfg.is_gpt2()) return std::make_unique<LayerNorm>(cfg.d_model, eps, tp);
  return std::make_unique<RMSNorm>(cfg.d_model, eps, tp);
}
}  // namespace

Block::Block(const ModelConfig& cfg, TensorParallel* tp, ContextParallel* cp) {
  // GPT-2 init: residual output projections get std 0.02 / sqrt(2 * n_layer).
  const float out_std = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg.n_layer));
  const bool g = cfg.is_gpt2();
  norm1_ = register_module(g ? "ln_1" : "input_layernorm", make_norm(cfg, tp));
  attn_ =
      register_module(g ? "attn" : "self_attn", std::make_unique<Attention>(cfg, out_std, tp, cp));
  norm2_ = register_module(g ? "ln_2" : "post_attention_layernorm", make_norm(cfg, tp));
  mlp_ = register_module("mlp", std::make_unique<MLP>(cfg, out_std, tp));
}

Variable Block::attention_residual(const Variable& x) {
  return autograd::add(x, (*attn_)((*norm1_)(x)));
}

Variable Block::mlp_residual(const Variable& h) {
  return autograd::add(h, (*mlp_)((*norm2_)(h)));
}

Variable Block::forward(const Variable& x) {
  return mlp_residual(attention_residual(x));
}

// Note [Selective recompute]: under CheckpointPolicy::Kind::selective a block keeps its
// residual stream and its MLP's activations and reruns its attention sublayer in backward:
//   h = checkpoint(x -> x + attn(norm1(x)), x)      keeps x (and h, the MLP's input)
//   y = h + mlp(norm2(h))                            recorded as usual
// Chosen by measurement (bench/activation_checkpointing_bench, B 8, T 256, f32, 2 threads):
// peak activations of a training step when backward reruns each part (the MLP and both
// columns from builds that checkpointed those instead), and the forward time of each
// sublayer over all blocks, i.e. what its rerun adds to the step:
//                      nothing  attention  MLP    both   block(full)  attn fwd  MLP fwd
//   GPT-2 bench-small  393.5    231.1      249.4  87.0   102.1 MiB    135 ms    178 ms
//   LLaMA twin         349.4    232.0      205.3  88.0    95.6 MiB     82 ms    153 ms
// (LLaMA twin: --llama, the same width, depth and heads with 3 kv heads and SwiGLU d_ff
// 1024; steps take ~1.3 s and ~1.1 s.) Peak saved per ms of rerun: attention 1.20 (GPT-2)
// and 1.43 (LLaMA) MiB/ms, the MLP 0.81 and 0.94, so selective reruns the attention
// sublayer: it keeps a lot for its FLOPs (the norm output, qkv and the q, k, v copies
// slice_last_dim makes, or the projections and RoPE copies; the attention output and the
// projection's) and flash attention stores no [T,T] matrix. Whole steps: selective costs
// +5-7% (median) for 41% (GPT-2) and 34% (LLaMA) less peak, full +16-24% for 74% and 73%.
// Rerunning both sublayers costs what full costs (the whole forward) and, with one
// sublayer's interior alive at a time, peaks below full: not a middle ground, so not
// selective (the tests assert none > selective > full).
// The residual add sits inside the checkpoint so the sublayer's output is not kept by the
// add, and x has the checkpoint as its only consumer: its gradient accumulates in the same
// order as without checkpointing (Note [Checkpoint rerun]), bit for bit. norm1's and the
// attention's parameters are used only inside the checkpoint, norm2's and the MLP's only
// outside it: each parameter's hooks fire once per backward. The block's own forward is not
// rerun, so its hooks fire once; the attention's (and norm1's) forward hooks fire again on the
// rerun, inside the block's backward (between its backward-pre and backward-post hooks, where
// FSDP holds the block's parameters).
Variable Block::call_selective(const Variable& x) {
  enter_forward();
  Variable h = autograd::checkpoint([this](const Variable& v) { return attention_residual(v); }, x);
  return exit_forward(mlp_residual(h));
}

}  // namespace braid::nn
