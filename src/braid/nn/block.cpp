#include "braid/nn/block.h"

#include <cmath>

#include "braid/autograd/functions.h"
#include "braid/nn/layer_norm.h"
#include "braid/nn/rms_norm.h"

namespace braid::nn {

namespace {
std::unique_ptr<UnaryModule> make_norm(const ModelConfig& cfg) {
  const float eps = static_cast<float>(cfg.norm_eps);
  if (cfg.is_gpt2()) return std::make_unique<LayerNorm>(cfg.d_model, eps);
  return std::make_unique<RMSNorm>(cfg.d_model, eps);
}
}  // namespace

Block::Block(const ModelConfig& cfg) {
  // GPT-2 init: residual output projections get std 0.02 / sqrt(2 * n_layer).
  const float out_std = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg.n_layer));
  const bool g = cfg.is_gpt2();
  norm1_ = register_module(g ? "ln_1" : "input_layernorm", make_norm(cfg));
  attn_ = register_module(g ? "attn" : "self_attn", std::make_unique<Attention>(cfg, out_std));
  norm2_ = register_module(g ? "ln_2" : "post_attention_layernorm", make_norm(cfg));
  mlp_ = register_module("mlp", std::make_unique<MLP>(cfg, out_std));
}

Variable Block::forward(const Variable& x) {
  Variable h = autograd::add(x, (*attn_)((*norm1_)(x)));
  return autograd::add(h, (*mlp_)((*norm2_)(h)));
}

}  // namespace braid::nn
