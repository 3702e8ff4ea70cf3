// The peak of a rank's `activations` category over a training micro-step (forward, then
// backward), in closed form from what the model's code keeps for backward: every op's output
// stays alive while a recorded node holds it as an input (autograd/engine.cpp), plus the f32
// statistics the norms and attention save, plus the gradient buffers of backward
// (Note [Gradient buffers]). N = micro_batch x seq_len tokens, C = d_model, H = d_ff,
// KV = n_kv_head x head_size, a = bytes of the compute dtype; per block, in elements of a:
//   GPT-2  kept 13NC + 2NH (ln_1, c_attn, q/k/v copies, attention, c_proj, residual, ln_2,
//          c_fc, gelu, c_proj, residual) + f32 4N + N x n_head (norm stats, attention lse)
//   LLaMA  kept 9NC + 3N KV + 3NH (norm, q, rope q, k, rope k, v, attention, o_proj, residual,
//          norm, gate, up, swiglu, down_proj, residual) + f32 2N + N x n_head
// Note [Activation peak]: backward reaches its peak inside the first block it runs, when its
// MLP is being differentiated: with everything the earlier blocks keep still alive, the block
// holds its kept tensors plus NH - NC (GPT-2, the gelu's gradient while the MLP's output is
// freed) or 2N(H - C) (LLaMA, the gradients of gate and up) more. A fully checkpointed block
// keeps only its output and reruns its whole forward there (its kept tensors again, its output
// and the incoming gradient: + 2NC); a selective one keeps its residual stream and MLP
// (GPT-2 4NC + 2NH, LLaMA 4NC + 3NH) and reruns the attention sublayer after its MLP's backward
// (Note [Selective recompute], nn/block.cpp). Before the blocks, the final norm's backward holds
// the gradients of its input and output (2NC): the peak when a block's own extra is smaller
// (tensor parallelism splits the MLP). Outside the blocks: the embedding's and the final
// norm's outputs and the batch's ids and targets (the final norm's and the loss's f32
// statistics are freed by then). The estimate takes the largest of these moments over the
// blocks, so "every k-th block" policies are covered too. memory_estimate_test holds it to the
// tracker's peaks within 10% for GPT-2 and LLaMA shapes, micro-batches, sequence lengths,
// precisions and policies.
// Note [Context-parallel activations]: under context parallelism (Note [Context-parallel
// layout], nn/context_parallel.h) a rank computes N = micro_batch x seq_len / cp tokens, and
// every term above is of those. Besides: the batch's ids and targets stay whole ([B, T], as the
// Trainer reads them), and the rank's own tokens of each (i32 N) are kept until backward; GPT-2
// looks its position rows up apart, at the tokens' places in the whole sequence, and adds them
// (the two lookups kept besides their sum: + 2NC outside the blocks). Ring attention keeps what
// plain attention keeps (its output and the f32 lse); its backward adds temporaries: dq, the late
// halves of q, of the output and its gradient and of the lse, and per block of another rank
// either the late queries' dq (N Cl / 2: a later rank's block) or the early halves of k, v and
// their gradients (2N KV: an earlier rank's); the estimate takes the larger, the ring's last
// rank's (it meets only earlier ranks' blocks) unless KV < Cl / 4. They count where attention's
// backward is a block's peak, in a selective block's rerun (GPT-2's here; LLaMA's MLP peaks
// higher). The key/value blocks and the dK/dV accumulators are in the communication category (Note
// [Context-parallel staging], memory_estimate.cpp). Ulysses keeps the head-split copies of q, k, v
// and of the output beside the token-split ones (+ 2NC + 2N KV per block); in a rerun, attention's
// backward holds the head-split q, k and v besides (the output and its gradient are held in one
// split at a time). Measured on the six-block shapes at 256 to 1024 tokens, cp 2 and 4, beside tp 2
// and pp 2 (memory_estimate_test): within 0.12%; not modelled, the RoPE positions LLaMA's blocks
// keep (4 T / cp bytes each: LLaMA's 0.07% under).
#pragma once

#include <cstdint>

#include "braid/core/dtype.h"
#include "braid/nn/model_config.h"

namespace braid::parallel {

// The part of the model a rank runs and how many micro-batches it holds at once: everything and
// one without pipeline parallelism; a pipeline stage holds blocks [begin, end), the embeddings
// if first, the final norm and LM head if last, and its schedule's micro-batches in flight
// (gpipe: all of a step's; 1f1b: at most pp - stage), each kept from its forward to its
// backward (Note [Pipeline memory], parallel/pipeline/stage_runner.h).
struct ActivationSpan {
  int64_t begin = 0, end = -1;  // end -1: the last block
  bool first = true, last = true;
  int64_t in_flight = 1;
  int64_t batches_held = 1;  // micro-batches whose ids and targets the rank keeps (a step's)
  // Whether a receive is posted while backward runs (a buffer of the residual stream): the next
  // gradient before the last stage, the next micro-batch's activations on the last under 1f1b.
  bool receives_during_backward = false;
};

// Context parallelism (Note [Context-parallel layout], nn/context_parallel.h): every sequence
// split over `size` ranks, attention by ring (zig-zag split) or Ulysses (contiguous, heads split
// inside attention).
struct ContextSplit {
  int size = 1;
  bool ulysses = false;
};

// Bytes on one rank; model.activation_checkpointing is the policy, tp the tensor-parallel size
// (Note [Tensor-parallel layout]: the heads and the MLP's hidden units split, the residual
// stream whole, each row-parallel output also kept as its all-reduced copy), cp the context
// split (Note [Context-parallel activations]). Throws naming the value when micro_batch_size or
// seq_len < 1, seq_len > the model's max_seq_len or seq_len does not split over cp.
int64_t estimate_activations(const nn::ModelConfig& model, int64_t micro_batch_size,
                             int64_t seq_len, DType compute, int tp = 1,
                             const ActivationSpan& span = {}, const ContextSplit& cp = {});

}  // namespace braid::parallel
