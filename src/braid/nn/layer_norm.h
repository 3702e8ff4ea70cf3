// LayerNorm over the last dimension: parameters "weight" (init 1) and "bias" (init 0).
#pragma once

#include "braid/nn/module.h"

namespace braid::nn {

class LayerNorm : public UnaryModule {
 public:
  // tp with sequence parallelism: this rank normalises only its rows, so the parameters'
  // gradients are summed over the tp ranks (Note [Tensor-parallel layout]).
  LayerNorm(int64_t dim, float eps, TensorParallel* tp = nullptr);

 protected:
  Variable forward(const Variable& x) override;

 private:
  float eps_;
  TensorParallel* tp_;
  Parameter* weight_;
  Parameter* bias_;
};

}  // namespace braid::nn
