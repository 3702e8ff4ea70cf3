#include "braid/nn/layer_norm.h"

#include "braid/autograd/functions.h"

namespace braid::nn {

LayerNorm::LayerNorm(int64_t dim, float eps) : eps_(eps) {
  weight_ = register_parameter("weight", Shape{dim}, {0.0f, 1.0f});
  bias_ = register_parameter("bias", Shape{dim}, {0.0f, 0.0f});
}

Variable LayerNorm::forward(const Variable& x) {
  return autograd::layernorm(x, weight_->var, bias_->var, eps_);
}

}  // namespace braid::nn
