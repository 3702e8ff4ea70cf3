#include "braid/nn/linear.h"

#include "braid/autograd/functions.h"

namespace braid::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, float init_std)
    : in_(in_features), out_(out_features) {
  weight_ = register_parameter("weight", Shape{out_features, in_features}, {init_std, 0.0f});
  if (with_bias) bias_ = register_parameter("bias", Shape{out_features}, {0.0f, 0.0f});
}

Variable Linear::forward(const Variable& x) {
  return autograd::linear(x, weight_->var, bias_ ? bias_->var : Variable());
}

}  // namespace braid::nn
