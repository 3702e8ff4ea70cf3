// The backward engine (internal to autograd/; users call Variable::backward).
#pragma once

#include "braid/autograd/variable.h"

namespace braid::autograd {

// Backpropagates `dout` (root's shape) from `root` through its recorded graph. When
// `dout_is_owned` the engine may reuse dout's storage as another gradient buffer (a buffer
// it allocated itself); a caller's tensor is never written.
void run_backward(const Variable& root, const Tensor& dout, bool dout_is_owned);

}  // namespace braid::autograd
