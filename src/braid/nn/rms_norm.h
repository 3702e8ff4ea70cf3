// RMSNorm over the last dimension (LLaMA): out = x / sqrt(mean(x^2) + eps) * weight.
// Parameter "weight" (init 1).
#pragma once

#include "braid/nn/module.h"

namespace braid::nn {

class RMSNorm : public UnaryModule {
 public:
  // tp with sequence parallelism: this rank normalises only its rows, so the parameters'
  // gradients are summed over the tp ranks (Note [Tensor-parallel layout]).
  RMSNorm(int64_t dim, float eps, TensorParallel* tp = nullptr);

 protected:
  Variable forward(const Variable& x) override;

 private:
  float eps_;
  TensorParallel* tp_;
  Parameter* weight_;
};

}  // namespace braid::nn
