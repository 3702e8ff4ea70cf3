// Block: the pre-norm residual transformer layer, x + attn(norm1(x)), then + mlp(norm2(x)).
// HF names: GPT-2 "ln_1", "attn", "ln_2", "mlp" (LayerNorm); LLaMA "input_layernorm",
// "self_attn", "post_attention_layernorm", "mlp" (RMSNorm). Declared in forward order.
#pragma once

#include "braid/nn/attention.h"
#include "braid/nn/mlp.h"
#include "braid/nn/model_config.h"

namespace braid::nn {

class Block : public UnaryModule {
 public:
  explicit Block(const ModelConfig& cfg, TensorParallel* tp = nullptr,
                 ContextParallel* cp = nullptr);

  // operator() under selective activation checkpointing (Note [Selective recompute]): the
  // same output and gradients, hooks included, but the attention sublayer keeps only its
  // input and backward reruns it.
  Variable call_selective(const Variable& x);
  Attention& attention() { return *attn_; }

 protected:
  Variable forward(const Variable& x) override;

 private:
  Variable attention_residual(const Variable& x);  // x + attn(norm1(x))
  Variable mlp_residual(const Variable& h);        // h + mlp(norm2(h))

  UnaryModule* norm1_;
  Attention* attn_;
  UnaryModule* norm2_;
  MLP* mlp_;
};

}  // namespace braid::nn
