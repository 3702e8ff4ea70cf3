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
  // Own weight; with tp its vocabulary rows are split as the token table's (vocab-parallel).
  LmHead(int64_t d_model, int64_t vocab_size, float init_std = 0.02f, TensorParallel* tp = nullptr);
  explicit LmHead(Embedding* tied);  // borrows wte (and its split)

  bool is_tied() const { return tied_ != nullptr; }
  Variable& weight();

  // x[N, C], targets[N] i32 -> summed cross-entropy / denominator (0: the mean over counted
  // targets), a scalar [1]. Runs the module's hooks. Vocab-parallel: x is the whole batch's
  // rows, or this rank's rows under sequence parallelism (gathered here); the loss is the
  // same on every tp rank and the logits are never gathered.
  Variable loss(const Variable& x, const Tensor& targets, double denominator, int32_t ignore_index);
  // x[N, C] -> logits[N, V] f32, without recording. Runs the module's hooks. Vocab-parallel:
  // every rank gets the whole vocabulary.
  Tensor logits(const Variable& x);

 private:
  Parameter* weight_ = nullptr;  // null when tied
  Embedding* tied_ = nullptr;
  TensorParallel* tp_ = nullptr;  // vocab-parallel
  int64_t vocab_ = 0, row_start_ = 0, rows_valid_ = 0;
};

}  // namespace braid::nn
