// Note [Model-parallel norm]: the global gradient norm (Note [Global norm], optim/clip_grad.h)
// when ranks hold different parts of the model. A data-parallel strategy reduces over its own
// group what its ranks hold disjointly (ZeRO pieces) and then over the model-parallel group
// (tensor-parallel slices), counting each parameter once: a parameter replicated on several
// tp ranks (norms, biases after a row-parallel layer, a shared kv head) counts on one of them
// (TpSlice::counts_in_norm), while every copy is still clipped by the same coefficient.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/nn/param_layout.h"
#include "braid/optim/clip_grad.h"

namespace braid::parallel {

// Exact max and integer sum over `group` (null or one rank: nothing to combine). `waited`
// (optional) accumulates the milliseconds spent waiting.
optim::NormReduction norm_reduction(comm::ProcessGroup* group, double* waited = nullptr);
// `first` over its ranks, then `then` over its ranks.
optim::NormReduction compose(optim::NormReduction first, optim::NormReduction then);

// The parts of `grads` (elements [begin, begin + grads.numel()) of unit u of `layout`) that
// belong to parameters counting in the norm on this rank; padding is skipped too.
std::vector<Tensor> counted_pieces(const nn::ParamLayout& layout, int unit, int64_t begin,
                                   const Tensor& grads);
// Whether every parameter counts (no tensor parallelism, or tp rank 0 of a model without
// split parameters): then the whole buffers can be used as they are.
bool all_count(const nn::ParamLayout& layout);

}  // namespace braid::parallel
