#include "braid/nn/layer_norm.h"

#include "braid/autograd/functions.h"

namespace braid::nn {

LayerNorm::LayerNorm(int64_t dim, float eps, TensorParallel* tp)
    : eps_(eps), tp_(tp && tp->sequence_parallel() ? tp : nullptr) {
  weight_ = register_parameter("weight", Shape{dim}, {0.0f, 1.0f});
  bias_ = register_parameter("bias", Shape{dim}, {0.0f, 0.0f});
}

Variable LayerNorm::forward(const Variable& x) {
  if (!tp_) return autograd::layernorm(x, weight_->var, bias_->var, eps_);
  return autograd::layernorm(x, tp_->sum_grad(weight_->var), tp_->sum_grad(bias_->var), eps_);
}

}  // namespace braid::nn
