#include "braid/nn/embedding.h"

#include <algorithm>

#include "braid/autograd/functions.h"

namespace braid::nn {

Embedding::Embedding(int64_t num, int64_t dim, float init_std, TensorParallel* tp,
                     bool vocab_parallel)
    : num_(num), dim_(dim), rows_valid_(num) {
  weight_ = register_parameter("weight", Shape{num, dim}, {init_std, 0.0f});
  if (!tp || !vocab_parallel) return;
  tp_ = tp;
  const int64_t padded = padded_vocab(num, tp->size());
  weight_->split({.dim = 0, .parts = tp->size(), .part = tp->rank(), .padded = padded});
  const int64_t rows = padded / tp->size();
  row_start_ = rows * tp->rank();
  rows_valid_ = std::clamp<int64_t>(num - row_start_, 0, rows);
}

Variable Embedding::operator()(const Tensor& ids, Embedding* positions, const Tensor& where) {
  enter_forward();
  if (positions) positions->enter_forward();
  Variable out;
  if (!tp_ && !where.defined()) {
    out = autograd::embedding(ids, weight_->var, positions ? positions->weight() : Variable());
  } else {
    out = tp_ ? tp_->exit(autograd::embedding_slice(ids, weight_->var, row_start_))
              : autograd::embedding(ids, weight_->var, Variable());
    if (positions) out = add_positions(out, ids, *positions, where);
  }
  if (positions) out = positions->exit_forward(out);
  return exit_forward(out);
}

// x: the summed token embeddings, [B, T, C] or this rank's rows [B*T/tp, C] under sequence
// parallelism; adds the position rows of its tokens (token t at where[t], else t).
Variable Embedding::add_positions(const Variable& x, const Tensor& ids, Embedding& positions,
                                  const Tensor& where) {
  const int64_t B = ids.size(0), T = ids.size(1);
  const bool sp = tp_ && tp_->sequence_parallel();
  if (!sp && where.defined() && where.numel() == B * T) {
    // A place for every token (packed rows, Note [Packed rows]; or one row): looked up as they
    // are, on whatever device they live.
    Variable pe = autograd::embedding(where.view(Shape{B, T}), positions.weight(), Variable());
    return autograd::add(x, autograd::reshape(pe, x.shape()));
  }
  const int64_t n = sp ? B * T / tp_->size() : B * T, first = sp ? n * tp_->rank() : 0;
  // The positions are written on the host and looked up where the ids live.
  Tensor pos = Tensor::empty(sp ? Shape{1, n} : Shape{B, T}, DType::i32, MemCategory::activations,
                             MemoryScope::current_tracker(), Device::cpu());
  int32_t* p = pos.data<int32_t>();
  Tensor where_h;
  if (where.defined()) where_h = where.device().is_cpu() ? where : where.to(Device::cpu());
  const int32_t* at = where_h.defined() ? where_h.data<int32_t>() : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = (first + i) % T;
    p[i] = at ? at[t] : static_cast<int32_t>(t);
  }
  if (!ids.device().is_cpu()) pos = pos.to(ids.device());
  Variable wpe = sp ? tp_->sum_grad(positions.weight()) : positions.weight();
  Variable pe = autograd::embedding(pos, wpe, Variable());
  return autograd::add(x, autograd::reshape(pe, x.shape()));
}

}  // namespace braid::nn
