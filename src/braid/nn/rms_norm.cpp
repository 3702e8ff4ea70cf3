#include "braid/nn/rms_norm.h"

#include "braid/autograd/functions.h"

namespace braid::nn {

RMSNorm::RMSNorm(int64_t dim, float eps, TensorParallel* tp)
    : eps_(eps), tp_(tp && tp->sequence_parallel() ? tp : nullptr) {
  weight_ = register_parameter("weight", Shape{dim}, {0.0f, 1.0f});
}

Variable RMSNorm::forward(const Variable& x) {
  return autograd::rmsnorm(x, tp_ ? tp_->sum_grad(weight_->var) : weight_->var, eps_);
}

}  // namespace braid::nn
