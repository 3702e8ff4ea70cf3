// Embedding: a [num, dim] table looked up by i32 ids. Parameter "weight". The Transformer
// fuses GPT-2's token and position tables into one autograd::embedding call (positions
// argument below).
#pragma once

#include "braid/nn/module.h"

namespace braid::nn {

class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim, float init_std = 0.02f);

  // ids[B,T] i32 -> [B,T,dim] = weight[ids] (+ positions.weight[t] when given). Runs the
  // forward hooks of this module (and of `positions`).
  Variable operator()(const Tensor& ids, Embedding* positions = nullptr);

  int64_t num() const { return num_; }
  int64_t dim() const { return dim_; }
  Variable& weight() { return weight_->var; }
  Parameter* weight_param() { return weight_; }

 private:
  int64_t num_, dim_;
  Parameter* weight_;
};

}  // namespace braid::nn
