#include "braid/nn/lm_head.h"

#include "braid/autograd/functions.h"
#include "braid/kernels/ops.h"

namespace braid::nn {

LmHead::LmHead(int64_t d_model, int64_t vocab_size, float init_std) {
  weight_ = register_parameter("weight", Shape{vocab_size, d_model}, {init_std, 0.0f});
}

LmHead::LmHead(Embedding* tied) : tied_(tied) {
  BRAID_CHECK(tied != nullptr, "LmHead: the tied embedding is null");
}

Variable& LmHead::weight() {
  return tied_ ? tied_->weight() : weight_->var;
}

Variable LmHead::loss(const Variable& x, const Tensor& targets, double denominator,
                      int32_t ignore_index) {
  enter_forward();
  return exit_forward(
      autograd::lm_head_cross_entropy(x, weight(), targets, denominator, ignore_index));
}

Tensor LmHead::logits(const Variable& x) {
  autograd::NoGradGuard no_grad;
  enter_forward();
  const Tensor& w = weight().value();
  Tensor out = Tensor::empty(Shape{x.shape()[0], w.size(0)}, DType::f32, MemCategory::activations);
  kernels::lm_head_logits(out, x.value(), w);
  exit_forward(Variable(out));
  return out;
}

}  // namespace braid::nn
