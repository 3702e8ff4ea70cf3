// The peak of a rank's `activations` category over a training micro-step (forward, then
// backward), in closed form from what the model's code keeps for backward: every op's output
// stays alive while a recorded node holds it as an input (autograd/engine.cpp), plus the f32
// statistics the norms and attention save, plus the gradient buffers of backward
// (Note [Gradient buffers]). N = micro_batch x seq_len tokens, C = d_model, H = d_ff,
// KV = n_kv_head x head_size, a = bytes of the compute dtype; per block, in elements of a:
//   GPT-2  kept 13NC + 2NH (ln_1, c_attn, q/k/v copies, attention, c_proj, residual, ln_2,
//          c_fc, gelu, c_proj, residual) + f32 4N + N x n_head (norm stats, attention lse); on
//          the host 10NC, no q/k/v copies (Note [Packed qkv], kernels/cpu/attention.cpp: its
//          attention reads them inside c_attn's output and writes its gradient whole there)
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
// Note [Sequence-parallel activations]: under sequence parallelism (Note [Tensor-parallel
// layout]) the residual stream between sublayers is n = N / tp rows on each rank: the norms'
// inputs, outputs and statistics, the residual sums, the reduce-scattered outputs of the
// row-parallel projections (and GPT-2's biases added after them), the embedding's
// reduce-scattered output (GPT-2: its position rows, their sum and the positions), the final
// norm's output and what a pipeline stage sends and receives. The projections and attention
// still run on all N tokens, and braid keeps each sublayer's all-gathered input for its
// column-parallel projection's backward (Megatron gathers it again there instead), as it keeps
// the LM head's gathered input; a row-parallel projection's output is whole before its
// reduce-scatter. So a block keeps, besides attention's and the MLP's interiors, GPT-2 4NC + 8nC
// (tensor parallelism alone: 10NC) and LLaMA 4NC + 6nC (8NC), and norm statistics of n tokens.
// The LM head's backward moment holds its input's gradient (N rows) over the last stage's kept
// tensors; a fused head (Note [Fused LM head]) also keeps its gradients (N C in the compute
// dtype and 4 V C) from its forward to that moment. The all-gather of a reduce-scattered
// output's gradient is a x N x C in the communication category, as tensor parallelism's
// all-reduce copy is.
// Note [Weight pass]: a split backward (B, autograd::backward_inputs, Note [Split backward])
// leaves every node with parameters unreleased until its W: its inputs' values and its output
// gradient. Per block that is the two norms' inputs, statistics and output gradients (4nC), the
// projections' inputs (the norms' outputs or their gathered copies, 2NC, the attention's output
// Cl and GPT-2's gelu or LLaMA's SwiGLU output Hl) and output gradients (GPT-2's qkv 3Cl, LLaMA's
// q, k, v Cl + 2KVl, the output projections' NC each, the MLP's hidden ones), and under tensor
// parallelism GPT-2's row-parallel biases' inputs and gradients (4nC); the first span adds the
// embedding's output gradient, the last the final norm's input and output gradient and the
// head's input. While B runs through a block, the blocks after it already hold only these, and
// the block itself keeps its MLP's hidden output past the MLP's backward. Measured on the
// six-block shapes (memory_estimate_test): GPT-2 exact on its first stage and 2.2% above on its
// last; LLaMA with full recomputation 3.9% and 4.5% above (a rerun block and the head's
// backward keep a few residual-stream tensors more than counted here).
#pragma once

#include <cstdint>

#include "braid/core/dtype.h"
#include "braid/nn/model_config.h"

namespace braid::parallel {

// The part of the model one micro-batch runs through on a rank: everything without pipeline
// parallelism; a pipeline's virtual stage holds blocks [begin, end), the embeddings if first, the
// final norm and LM head if last.
struct ActivationSpan {
  int64_t begin = 0, end = -1;  // end -1: the last block
  bool first = true, last = true;
  bool split_backward = false;  // a zero-bubble schedule's B and W: the LM head recomputes
};

// Context parallelism (Note [Context-parallel layout], nn/context_parallel.h): every sequence
// split over `size` ranks, attention by ring (zig-zag split) or Ulysses (contiguous, heads split
// inside attention).
struct ContextSplit {
  int size = 1;
  bool ulysses = false;
};

// Tensor parallelism over `size` ranks (Note [Tensor-parallel layout]: the heads and the MLP's
// hidden units split, each row-parallel output also kept as its all-reduced copy), with
// sequence parallelism or without (Note [Sequence-parallel activations]).
struct TensorSplit {
  int size = 1;
  bool sequence = false;
};

// What one micro-batch of a span costs in the activations category, in bytes (Note [Activation
// peak]; Note [Pipeline activations], pipeline_estimate.h, combines them over a schedule).
struct SpanActivations {
  int64_t kept = 0;         // from its forward to its backward
  int64_t peak = 0;         // the most while its backward runs, its own kept included
  int64_t weight_kept = 0;  // split backward (zb_h1): from its B to its W (Note [Weight pass])
  int64_t split_peak = 0;   // split backward: the most while its B runs
  int64_t stream = 0;       // the residual stream between blocks: a stage's message
  int64_t batch = 0;        // one micro-batch's ids and targets (i32, whole sequences)
};

// Bytes on one rank for one micro-batch of `span`; model.activation_checkpointing is the policy,
// cp the context split (Note [Context-parallel activations]). Throws naming the value when
// micro_batch_size or seq_len < 1, seq_len > the model's max_seq_len, seq_len does not split
// over cp or the tokens do not split over tp under sequence parallelism.
// on_device: the model runs on a device (training.device cuda), whose GPT-2 attention takes q,
// k and v as copies.
SpanActivations span_activations(const nn::ModelConfig& model, int64_t micro_batch_size,
                                 int64_t seq_len, DType compute, const TensorSplit& tp = {},
                                 const ActivationSpan& span = {}, const ContextSplit& cp = {},
                                 bool on_device = false);

// The peak of a training micro-step without a pipeline: the batch, the whole model's span.
int64_t estimate_activations(const nn::ModelConfig& model, int64_t micro_batch_size,
                             int64_t seq_len, DType compute, const TensorSplit& tp = {},
                             const ContextSplit& cp = {}, bool on_device = false);

}  // namespace braid::parallel
