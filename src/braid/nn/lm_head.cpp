#include "braid/nn/lm_head.h"

#include <algorithm>

#include "braid/autograd/functions.h"
#include "braid/kernels/ops.h"

namespace braid::nn {

LmHead::LmHead(int64_t d_model, int64_t vocab_size, float init_std, TensorParallel* tp)
    : tp_(tp), vocab_(vocab_size), rows_valid_(vocab_size) {
  weight_ = register_parameter("weight", Shape{vocab_size, d_model}, {init_std, 0.0f});
  if (!tp) return;
  const int64_t padded = padded_vocab(vocab_size, tp->size());
  weight_->split({.dim = 0, .parts = tp->size(), .part = tp->rank(), .padded = padded});
  const int64_t rows = padded / tp->size();
  row_start_ = rows * tp->rank();
  rows_valid_ = std::clamp<int64_t>(vocab_size - row_start_, 0, rows);
}

LmHead::LmHead(Embedding* tied) : tied_(tied) {
  BRAID_CHECK(tied != nullptr, "LmHead: the tied embedding is null");
  tp_ = tied->tensor_parallel();
  vocab_ = tied->num();
  row_start_ = tied->row_start();
  rows_valid_ = tied->rows_valid();
}

Variable& LmHead::weight() {
  return tied_ ? tied_->weight() : weight_->var;
}

Variable LmHead::loss(const Variable& x, const Tensor& targets, double denominator,
                      int32_t ignore_index) {
  enter_forward();
  if (!tp_)
    return exit_forward(
        autograd::lm_head_cross_entropy(x, weight(), targets, denominator, ignore_index));
  return exit_forward(tp_->vocab_parallel_cross_entropy(
      tp_->enter(x), weight(), targets, denominator, ignore_index, row_start_, rows_valid_));
}

Tensor LmHead::logits(const Variable& x) {
  autograd::NoGradGuard no_grad;
  enter_forward();
  const Tensor& w = weight().value();
  Tensor out;
  if (tp_) {
    out = tp_->vocab_parallel_logits(tp_->enter(x).value(), w, vocab_);
  } else {
    out = Tensor::empty(Shape{x.shape()[0], w.size(0)}, DType::f32, MemCategory::activations);
    kernels::lm_head_logits(out, x.value(), w);
  }
  exit_forward(Variable(out));
  return out;
}

}  // namespace braid::nn
