// LayerNorm over the last dimension: parameters "weight" (init 1) and "bias" (init 0).
#pragma once

#include "braid/nn/module.h"

namespace braid::nn {

class LayerNorm : public UnaryModule {
 public:
  LayerNorm(int64_t dim, float eps);

 protected:
  Variable forward(const Variable& x) override;

 private:
  float eps_;
  Parameter* weight_;
  Parameter* bias_;
};

}  // namespace braid::nn
