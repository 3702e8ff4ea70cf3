// Global-norm gradient clipping, as torch.nn.utils.clip_grad_norm_, with an exact norm.
//
// Note [Global norm]: the norm is computed exactly (Note [Exact norm], kernels/cpu/exact_norm.cpp)
// so that it is the same bits however the gradients are split across ranks: DDP holding them
// whole and ZeRO holding shards cut anywhere get the same clipping coefficient, and so the same
// weights. Two reductions make it global: the max |g| over every piece (it fixes the
// fixed-point scale), then the exact integer sum of squares. A distributed strategy passes both
// over the ranks that hold disjoint pieces (ZeRO shards, tensor-parallel slices, pipeline
// stages), counting replicas once. Every rank then applies the same coefficient.
#pragma once

#include <functional>
#include <vector>

#include "braid/core/tensor.h"

namespace braid::optim {

// How the pieces held by different ranks combine; empty functions: this rank holds everything.
struct NormReduction {
  std::function<float(float)> max;        // max over the ranks (all-reduce max)
  std::function<__int128(__int128)> sum;  // exact integer sum over the same ranks
};

// The fixed-point scale for a global max |g| (55 - 2 e where max < 2^e; 0 for max 0).
int exact_norm_shift(float max_abs);

// The norm without clipping: +inf when any gradient is inf or nan.
double grad_norm(const std::vector<Tensor>& grads, const NormReduction& reduce = {});
// The same for gradients this rank does not hold in memory (offloaded): local_max is the max
// |g| over its pieces, local_sum(shift) their kernels::sum_squares_fixed with that shift.
double grad_norm(float local_max, const std::function<__int128(int shift)>& local_sum,
                 const NormReduction& reduce = {});
// The factor clip_grad_norm scales by: max_norm / (norm + 1e-6) when that is < 1, else 1.
float clip_coefficient(double norm, double max_norm);

// Returns the total norm before clipping. Scales every gradient by max_norm / (norm + 1e-6)
// when that is < 1 (max_norm 0: no clipping). A non-finite norm (inf/nan gradients) leaves the
// gradients untouched and is returned, or throws when error_if_nonfinite: the caller must skip
// the step either way (see is_finite_norm), never apply it.
//
// Note [Unscale with the clip]: with fp16 loss scaling the gradients hold loss_scale times their
// value. The norm returned is then the unscaled one (norm / loss_scale), clipping compares that
// with max_norm, and one multiply per element applies clip coefficient / loss_scale, unscaling
// and clipping together as DeepSpeed's unscale_and_clip_grads does.
double clip_grad_norm(std::vector<Tensor> grads, double max_norm, const NormReduction& reduce = {},
                      bool error_if_nonfinite = false, double loss_scale = 1.0);
// The same with the norm taken over `counted` (the parts of the gradients this rank counts, Note
// [Model-parallel norm] in parallel/model_parallel_norm.h) and the factor applied to all of
// `grads`.
double clip_grad_norm(std::vector<Tensor> grads, const std::vector<Tensor>& counted,
                      double max_norm, const NormReduction& reduce, double loss_scale = 1.0);
// The one factor clip_grad_norm multiplies by, for gradients scaled by loss_scale whose scaled
// norm is scaled_norm (1 when nothing changes them).
float unscale_clip_factor(double scaled_norm, double max_norm, double loss_scale);

bool is_finite_norm(double norm);

}  // namespace braid::optim
