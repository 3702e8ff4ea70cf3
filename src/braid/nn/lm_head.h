// LmHead: the output projection fused with softmax cross-entropy. Either it owns
// "lm_head.weight" [V, C] (untied), or it borrows the token embedding's weight (tied: no
// parameter of its own). It is a module either way, so it has hooks like any other module: a
// sharded strategy gathers the embedding's unit on them when the weights are tied.
#pragma once

#include <cstdint>

#include "braid/nn/embedding.h"
#include "braid/nn/module.h"

namespace braid::nn {

class LmHead : public Module {
 public:
  LmHead(int64_t d_model, int64_t vocab_size, float init_std = 0.02f);  // own weight
  explicit LmHead(Embedding* tied);                                     // borrows wte

  bool is_tied() const { return tied_ != nullptr; }
  Variable& weight();

  // x[N, C], targets[N] i32 -> summed cross-entropy / denominator (0: the mean over counted
  // targets), a scalar [1]. Runs the module's hooks.
  Variable loss(const Variable& x, const Tensor& targets, double denominator, int32_t ignore_index);
  // x[N, C] -> logits[N, V] f32, without recording. Runs the module's hooks.
  Tensor logits(const Variable& x);

 private:
  Parameter* weight_ = nullptr;  // null when tied
  Embedding* tied_ = nullptr;
};

}  // namespace braid::nn
