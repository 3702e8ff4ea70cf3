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
  explicit Block(const ModelConfig& cfg);

 protected:
  Variable forward(const Variable& x) override;

 private:
  UnaryModule* norm1_;
  Attention* attn_;
  UnaryModule* norm2_;
  MLP* mlp_;
};

}  // namespace braid::nn
