// The backward engine (internal to autograd/; users call Variable::backward).
#pragma once

#include <vector>

#include "braid/autograd/variable.h"
#include "braid/autograd/weight_gradients.h"

namespace braid::autograd {

// Backpropagates `dout` (root's shape) from `root` through its recorded graph. When
// `dout_is_owned` the engine may reuse dout's storage as another gradient buffer (a buffer
// it allocated itself); a caller's tensor is never written.
void run_backward(const Variable& root, const Tensor& dout, bool dout_is_owned);

// Note [Split backward]: the split backward in progress on this thread (backward_inputs,
// weight_gradients.h); run_backward reads it, so a checkpoint's inner backward splits too.
struct SplitBackward {
  WeightGradients* weights = nullptr;
  std::vector<const VariableImpl*> now;  // leaves whose gradients are computed now
  bool computes_now(const VariableImpl* leaf) const;
};
SplitBackward* current_split();  // null: none
void set_current_split(SplitBackward* split);
// Within a split backward, `leaf`'s gradient is computed now (a checkpoint's rerun input).
void compute_now(const Variable& leaf);

// The leaf's accumulation target (allocated zeroed on first use), and its hooks fired.
Tensor& leaf_grad(VariableImpl& leaf);
void fire_hooks(Variable& leaf);

}  // namespace braid::autograd
