#include "braid/nn/linear.h"

#include "braid/autograd/functions.h"
#include "braid/core/error.h"

namespace braid::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, float init_std,
               const LinearSplit& split)
    : in_(in_features), out_(out_features), split_(split) {
  weight_ = register_parameter("weight", Shape{out_features, in_features}, {init_std, 0.0f});
  if (with_bias) bias_ = register_parameter("bias", Shape{out_features}, {0.0f, 0.0f});
  if (split.kind == LinearSplit::Kind::none) return;
  TensorParallel* tp = split.tp;
  BRAID_CHECK(tp != nullptr, "Linear: a tensor-parallel split needs its TensorParallel");
  if (split.kind == LinearSplit::Kind::row) {
    weight_->split({.dim = 1, .parts = tp->size(), .part = tp->rank()});
    return;  // the bias stays whole (added after the reduction)
  }
  const int parts = split.parts > 0 ? split.parts : tp->size();
  BRAID_CHECK(tp->size() % parts == 0, "Linear: ", parts, " parts over ", tp->size(),
              " tensor-parallel ranks");
  replicas_ = tp->size() / parts;
  TpSlice s{.dim = 0, .sections = split.sections, .parts = parts, .part = tp->rank() / replicas_};
  s.counts_in_norm = tp->rank() % replicas_ == 0;
  weight_->split(s);
  if (bias_) bias_->split(s);
}

Variable Linear::forward(const Variable& x) {
  const Variable b = bias_ ? bias_->var : Variable();
  switch (split_.kind) {
    case LinearSplit::Kind::none:
      return autograd::linear(x, weight_->var, b);
    case LinearSplit::Kind::column: {
      if (replicas_ == 1) return autograd::linear(x, weight_->var, b);
      // A part shared by several ranks: each sees only its own uses (Note [Tensor-parallel
      // layout]); their gradients add up.
      TensorParallel& tp = *split_.tp;
      return autograd::linear(x, tp.sum_grad(weight_->var, replicas_),
                              b.defined() ? tp.sum_grad(b, replicas_) : b);
    }
    case LinearSplit::Kind::row: {
      TensorParallel& tp = *split_.tp;
      Variable y = tp.exit(autograd::linear(x, weight_->var, Variable()));
      if (!b.defined()) return y;
      return autograd::bias_add(y, tp.sequence_parallel() ? tp.sum_grad(b) : b);
    }
  }
  return {};
}

}  // namespace braid::nn
