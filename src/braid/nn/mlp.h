// The block's MLP. GPT-2: "c_fc" [H, C] -> GELU (tanh) -> "c_proj" [C, H], with biases.
// LLaMA: down_proj(silu(gate_proj(x)) * up_proj(x)), "gate_proj"/"up_proj" [H, C],
// "down_proj" [C, H], no biases. Input and output x[B, T, C].
#pragma once

#include "braid/nn/linear.h"
#include "braid/nn/model_config.h"

namespace braid::nn {

class MLP : public UnaryModule {
 public:
  // With tp: this rank's columns of the hidden width (Note [Tensor-parallel layout]).
  MLP(const ModelConfig& cfg, float out_std, TensorParallel* tp = nullptr);

 protected:
  Variable forward(const Variable& x) override;

 private:
  bool is_gpt2_;
  TensorParallel* tp_;
  Linear* c_fc_ = nullptr;       // GPT-2
  Linear* gate_proj_ = nullptr;  // LLaMA
  Linear* up_proj_ = nullptr;
  Linear* out_proj_ = nullptr;  // c_proj / down_proj
};

}  // namespace braid::nn
