// RMSNorm over the last dimension (LLaMA): out = x / sqrt(mean(x^2) + eps) * weight.
// Parameter "weight" (init 1).
#pragma once

#include "braid/nn/module.h"

namespace braid::nn {

class RMSNorm : public UnaryModule {
 public:
  RMSNorm(int64_t dim, float eps);

 protected:
  Variable forward(const Variable& x) override;

 private:
  float eps_;
  Parameter* weight_;
};

}  // namespace braid::nn
