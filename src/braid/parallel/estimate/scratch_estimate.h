// The peak of a rank's `scratch` category: kernel scratch (Note [Kernel scratch],
// kernels/cpu/common.h), which grows and is never given back while the rank's thread lives.
// Note [Scratch estimate]: one training micro-step's kernels, in the order the model runs them
// (each block's norms, projections, rotary embedding and attention forward; the LM head's
// forward and backward passes; the blocks' backward in reverse; the position table's gradient),
// replayed through kernels::ScratchPlan, which makes each kernel's requests with its slot and
// the kernels' growth rule, and asks the GEMM library for its work memory at these shapes and
// `threads` (oneDNN's scratchpad). Recomputation (checkpointing) and later micro-steps repeat
// requests the slots already hold. So the estimate follows the code, the thread count and the
// GEMM library built here; memory_estimate_test and strategy_memory_test hold it to the
// tracker within 10%. Sequence parallelism asks the same: its norms' and adds' scratch depends on
// the width alone, and the projections, attention and the LM head run on the gathered tokens.
// Not modelled: fp16's loss-scaler check (sum_squares, one f64 per 16K gradient elements).
#pragma once

#include <cstdint>

#include "braid/core/dtype.h"
#include "braid/nn/model_config.h"
#include "braid/parallel/estimate/activation_estimate.h"

namespace braid::parallel {

// Bytes of scratch one rank's thread holds after a step: the blocks, embeddings and head of
// `span`, tp rank 0's slices (Note [Tensor-parallel layout]), its seq_len / cp tokens of each
// sequence (ring attention: the blocks of Note [Ring attention]; Ulysses: whole sequences of
// its heads), `threads` OpenMP threads.
int64_t estimate_scratch(const nn::ModelConfig& model, int64_t micro_batch_size, int64_t seq_len,
                         DType compute, int tp, const ActivationSpan& span, int threads,
                         const ContextSplit& cp = {});

}  // namespace braid::parallel
