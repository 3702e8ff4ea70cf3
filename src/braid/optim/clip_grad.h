// Global-norm gradient clipping, as torch.nn.utils.clip_grad_norm_.
//
// Note [Global norm]: the squared norm is summed in f64 over the local tensors in order, then
// passed through `reduce_sum_squares` (a distributed strategy sums it over the ranks that
// hold disjoint pieces: ZeRO shards, tensor-parallel slices, pipeline stages), so the norm is
// the true global one whatever is sharded. Every rank then applies the same coefficient.
#pragma once

#include <functional>
#include <vector>

#include "braid/core/tensor.h"

namespace braid::optim {

// Returns the total norm before clipping. Scales every gradient by max_norm / (norm + 1e-6)
// when that is < 1. A non-finite norm (inf/nan gradients) leaves the gradients untouched and
// is returned, or throws when error_if_nonfinite: the caller must skip the step either way
// (see is_finite_norm), never apply it.
double clip_grad_norm(std::vector<Tensor> grads, double max_norm,
                      const std::function<double(double)>& reduce_sum_squares = {},
                      bool error_if_nonfinite = false);

// The norm without clipping (same reduction).
double grad_norm(const std::vector<Tensor>& grads,
                 const std::function<double(double)>& reduce_sum_squares = {});

bool is_finite_norm(double norm);

}  // namespace braid::optim
