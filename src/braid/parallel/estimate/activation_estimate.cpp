#include "braid/parallel/estimate/activation_estimate.h"

#include <algorithm>
#include <vector>

#include "braid/autograd/functions.h"
#include "braid/core/error.h"

namespace braid::parallel {

namespace {

// Bytes one block keeps, the most it adds while backward runs through it (Note [Activation
// peak]), and what a split backward keeps of it from B to W (Note [Weight pass]).
struct BlockCost {
  int64_t kept = 0;
  int64_t backward_extra = 0;
  int64_t weight = 0;
  int64_t split_extra = 0;  // backward_extra under B, which keeps the MLP's hidden output
};

// Sizes per token, in elements: C the residual stream, and what tp rank 0 holds of the
// attention (Cl = its heads' width, KVl its kv heads', NHl its heads) and the MLP (Hl). N tokens
// run through the projections and attention; n_ (N / tp under sequence parallelism, else N) are
// the residual stream's rows. A row-parallel projection leaves its output (N), under tensor
// parallelism also the reduced copy (and GPT-2's bias added after it: red_ rows), and under
// sequence parallelism its sublayer's gathered input (gat_ rows).
class BlockModel {
 public:
  BlockModel(const nn::ModelConfig& m, int64_t tokens, DType compute, const TensorSplit& tp,
             const ContextSplit& cp, bool on_device)
      : m_(m), N_(tokens), a_(static_cast<int64_t>(dtype_size(compute))), cp_(cp) {
    // Note [Packed qkv]: GPT-2's attention on the host, whole sequences, reads q, k and v inside
    // c_attn's output; elsewhere (a device, context parallelism) it takes copies of them.
    packed_qkv_ = m.is_gpt2() && cp.size == 1 && !on_device;
    const int64_t kv_parts = std::min<int64_t>(m.n_kv_head, tp.size);
    C_ = m.d_model;
    Cl_ = m.n_head / tp.size * m.head_size();
    KVl_ = m.n_kv_head / kv_parts * m.head_size();
    Hl_ = m.d_ff / tp.size;
    NHl_ = m.n_head / tp.size;
    n_ = tp.sequence ? N_ / tp.size : N_;
    tp_ = tp.size > 1;
    sp_ = tp.sequence;
    red_ = tp.size == 1 ? 0 : (m.is_gpt2() ? 2 : 1) * n_;
    gat_ = sp_ ? N_ : 0;
    // Ulysses: the head-split copies of q, k, v and of the output, kept beside the token-split
    // ones (Note [Context-parallel activations]).
    if (cp.size > 1 && cp.ulysses) heads_ = 2 * Cl_ + 2 * KVl_;
  }

  int64_t stream() const { return a_ * n_ * C_; }

  BlockCost cost(nn::CheckpointPolicy::Kind kind) const {
    BlockCost c = policy_cost(kind);
    // Under B the MLP's output projection keeps its input (GPT-2's gelu, LLaMA's SwiGLU output)
    // past the MLP's backward moment, where one backward has freed it (measured).
    c.split_extra = c.backward_extra + a_ * N_ * Hl_;
    return c;
  }

  BlockCost policy_cost(nn::CheckpointPolicy::Kind kind) const {
    using Kind = nn::CheckpointPolicy::Kind;
    switch (kind) {
      case Kind::none:
        return {kept_whole(), mlp_backward(), weight()};
      case Kind::full:
        // The rerun holds the block's tensors again, its output and the incoming gradient.
        return {stream(), kept_whole() + mlp_backward() + 2 * stream(), weight()};
      case Kind::selective: {
        // The residual stream (h, the MLP's output sum), norm2 and the MLP.
        const int64_t row = a_ * C_ * (N_ + red_ + gat_);
        const int64_t kept = m_.is_gpt2() ? a_ * (3 * n_ * C_ + 2 * N_ * Hl_) + row + 4 * n_ * 2
                                          : a_ * (3 * n_ * C_ + 3 * N_ * Hl_) + row + 4 * n_;
        return {kept, std::max(mlp_backward(), attention_rerun() - kept), weight()};
      }
    }
    return {};
  }

  // Outside the blocks, on the first span: the embedding's output (under tensor parallelism
  // also its reduced copy, and GPT-2's position rows, their sum and the positions). Under
  // context parallelism GPT-2 looks up its position rows apart (at the tokens' places in the
  // whole sequence) and adds them: both lookups are kept, and their sum.
  int64_t first_part() const {
    if (!tp_) return (m_.is_gpt2() && cp_.size > 1 ? 3 : 1) * a_ * N_ * C_;
    if (!m_.is_gpt2()) return a_ * (N_ + n_) * C_;
    return a_ * (N_ + 3 * n_) * C_ + 4 * n_;
  }
  // On the last span: the final norm's output, and under sequence parallelism the LM head's
  // gathered input.
  int64_t last_part() const { return stream() + a_ * gat_ * C_; }
  // The LM head's backward moment over the last span's kept tensors: the gradients of the final
  // norm's input and output, or under sequence parallelism the head's input gradient (N rows).
  int64_t head_backward() const { return sp_ ? a_ * N_ * C_ : 2 * stream(); }
  // Note [Fused LM head] (autograd/functions_dense.cpp): a head that takes its gradients in the
  // forward holds them from its forward to its backward, the input's (N rows in the compute
  // dtype) and the weight's (V C, f32): kept with the micro-batch (a pipeline's last stage holds
  // them for each micro-batch in flight), and in the head's backward its input's gradient comes
  // beside them. The vocabulary-parallel head (tensor parallelism) and a split backward's
  // recompute instead.
  int64_t fused_head_held(bool split_backward) const {
    if (tp_ || split_backward || !autograd::lm_head_fits_fused_on_host(m_.vocab_size, C_)) return 0;
    return a_ * N_ * C_ + 4 * m_.vocab_size * C_;
  }
  int64_t head_moment(bool split_backward) const {
    const int64_t held = fused_head_held(split_backward);
    return std::max(head_backward(), held > 0 ? held + a_ * N_ * C_ : 0);
  }
  // What the first and last span's parameter nodes keep from B to W: the embedding's output
  // gradient; the final norm's input and output gradient and the head's input.
  int64_t first_weight() const { return a_ * N_ * C_; }
  int64_t last_weight() const { return 2 * stream() + a_ * N_ * C_ + 4 * n_ * 2; }

 private:
  // Everything a block without checkpointing keeps (the header's list): the two norms' outputs
  // and the two residual sums, the projections' outputs, and their f32 statistics.
  int64_t kept_whole() const {
    const int64_t stats = 4 * N_ * NHl_;  // attention's lse [B, NHl, T] f32
    const int64_t common = 4 * n_ * C_ + 2 * C_ * (N_ + red_ + gat_);
    // GPT-2: c_attn's output (3 Cl), the q, k, v copies (3 Cl) unless packed, the attention's
    // output (Cl).
    const int64_t attn = packed_qkv_ ? 4 * Cl_ : 7 * Cl_;
    if (m_.is_gpt2()) return a_ * (common + N_ * (attn + 2 * Hl_ + heads_)) + 4 * n_ * 4 + stats;
    return a_ * (common + N_ * (3 * Cl_ + 3 * KVl_ + 3 * Hl_ + heads_)) + 4 * n_ * 2 + stats;
  }
  // What the MLP's backward adds over the block's kept tensors.
  int64_t mlp_backward() const { return a_ * N_ * (m_.is_gpt2() ? Hl_ - C_ : 2 * (Hl_ - C_)); }
  // A selective block's attention rerun at its attention's backward, over what the earlier
  // blocks keep: the sublayer's tensors but its output projection's, and the gradients of the
  // block's input and output, of the attention's output and of q, k and v.
  int64_t attention_rerun() const {
    const int64_t stats = 4 * N_ * NHl_;
    const int64_t common = 4 * n_ * C_ + C_ * (red_ + gat_);
    // GPT-2: the rerun's c_attn output, q/k/v copies and attention output, with the gradients
    // of the attention's output and of q, k and v; packed, no copies and c_attn's gradient in
    // their gradients' place (8 Cl, not 11).
    const int64_t rerun = packed_qkv_ ? 8 * Cl_ : 11 * Cl_;
    if (m_.is_gpt2()) return a_ * (common + rerun * N_) + 4 * n_ * 2 + stats + context();
    return a_ * (common + N_ * (5 * Cl_ + 5 * KVl_)) + 4 * n_ + stats + context();
  }
  // Note [Weight pass]: what a block's nodes with parameters keep from B to W: the norms' inputs,
  // statistics and output gradients, each projection's input and output gradient, a
  // row-parallel bias's input and gradient (GPT-2 under tensor parallelism).
  int64_t weight() const {
    const int64_t norms = 4 * n_ * C_, inputs = 2 * N_ * C_, rows = 2 * N_ * C_;
    const int64_t bias = m_.is_gpt2() && tp_ ? 4 * n_ * C_ : 0;
    if (m_.is_gpt2())
      return a_ * (norms + inputs + rows + bias + N_ * (4 * Cl_ + 2 * Hl_)) + 4 * n_ * 4;
    return a_ * (norms + inputs + rows + N_ * (2 * Cl_ + 2 * KVl_ + 3 * Hl_)) + 4 * n_ * 2;
  }
  // What context-parallel attention holds at that moment beyond a plain one's (Note
  // [Context-parallel activations]); the moment sits one a x Cl per token above the start of
  // attention's backward (measured), where these come on top.
  int64_t context() const {
    if (cp_.size == 1) return 0;
    const int64_t start = -a_ * N_ * Cl_;
    // Ulysses: the head-split q, k and v beside the token-split ones (the output and its
    // gradient are held in one split at a time).
    if (cp_.ulysses) return start + a_ * N_ * (Cl_ + 2 * KVl_);
    // Ring: dq, the late halves of q, of the output and its gradient (a 2.5 Cl), and of the lse
    // (f32); then per block of another rank either the late queries' dq (a later rank's block,
    // a Cl / 2) or the early halves of k and v and their gradients (an earlier rank's, a 2 KVl).
    // The ring's last rank has only the latter, its first only the former: the estimate takes
    // the larger.
    const int64_t other = a_ * N_ * std::max(Cl_ / 2, 2 * KVl_);
    return start + a_ * N_ * 5 * Cl_ / 2 + 4 * (N_ / 2) * NHl_ + other;
  }

  const nn::ModelConfig& m_;
  int64_t N_, a_;
  ContextSplit cp_;
  int64_t C_ = 0, Cl_ = 0, KVl_ = 0, Hl_ = 0, NHl_ = 0, n_ = 0, red_ = 0, gat_ = 0, heads_ = 0;
  bool tp_ = false, sp_ = false, packed_qkv_ = false;
};

}  // namespace

SpanActivations span_activations(const nn::ModelConfig& model, int64_t micro_batch_size,
                                 int64_t seq_len, DType compute, const TensorSplit& tp,
                                 const ActivationSpan& span, const ContextSplit& cp,
                                 bool on_device) {
  BRAID_CHECK(micro_batch_size >= 1, "estimate_activations: micro_batch_size must be >= 1, got ",
              micro_batch_size);
  BRAID_CHECK(seq_len >= 1 && seq_len <= model.max_seq_len,
              "estimate_activations: seq_len must be in [1, ", model.max_seq_len,
              "] (the model's max_seq_len), got ", seq_len);
  BRAID_CHECK(tp.size >= 1, "estimate_activations: tensor_parallel_size must be >= 1, got ",
              tp.size);
  const int64_t end = span.end < 0 ? model.n_layer : span.end;
  BRAID_CHECK(span.begin >= 0 && span.begin < end && end <= model.n_layer,
              "estimate_activations: blocks [", span.begin, ", ", end, ") of ", model.n_layer);
  BRAID_CHECK(cp.size >= 1, "estimate_activations: context_parallel_size must be >= 1, got ",
              cp.size);
  const int64_t split = cp.size == 1 ? 1 : (cp.ulysses ? cp.size : 2 * cp.size);
  BRAID_CHECK(seq_len % split == 0, "estimate_activations: seq_len ", seq_len,
              " does not split over context_parallel_size ", cp.size, " (",
              cp.ulysses ? "ulysses: a multiple of it" : "ring: a multiple of 2 x it", ")");
  const int64_t N = micro_batch_size * seq_len / cp.size;  // this rank's tokens
  BRAID_CHECK(
      !tp.sequence || N % tp.size == 0, "estimate_activations: sequence parallelism splits ", N,
      " tokens a micro-batch over tensor_parallel_size ", tp.size, ": they must divide by it");
  const BlockModel blocks(model, N, compute, tp, cp, on_device);
  const int64_t stream = blocks.stream();
  // One micro-batch's tensors outside the blocks: the embedding's outputs on the first span,
  // else the activations received from the previous one; the final norm's output on the last.
  int64_t ends = span.first ? blocks.first_part() : stream;
  if (span.last) ends += blocks.last_part();
  // Under context parallelism the rank's own tokens of the ids (first span) and the targets
  // (last), i32.
  if (cp.size > 1) ends += 4 * N * (span.first + span.last);
  int64_t weight_ends = (span.first ? blocks.first_weight() : 0);
  if (span.last) weight_ends += blocks.last_weight();
  // Its blocks' tensors, and the most its backward adds: inside a block (Note [Activation
  // peak]), or the final norm's backward before any block's (the gradients of its input and
  // output). The block moments are those of one whole model, measured with the final norm's
  // output (counted in `ends`) alive. A span before the last holds the residual stream three
  // more times instead: its output (the root of its backward) and the gradient it received for
  // it stay alive throughout, where one model frees both early in its last block's backward (a
  // rerun block holds that gradient anyway: two), and no final norm's output.
  // A split backward (B, Note [Weight pass]) keeps the weight pass's tensors of the blocks it has
  // been through (the later ones) in place of what they kept.
  const nn::CheckpointPolicy& policy = model.activation_checkpointing;
  std::vector<BlockCost> costs;
  std::vector<int64_t> moments;  // what block i adds at its B's peak
  int64_t kept = 0, weight = 0, peak = 0;
  for (int64_t i = span.begin; i < end; ++i) {
    const auto kind = policy.applies_to(i) ? policy.kind : nn::CheckpointPolicy::Kind::none;
    costs.push_back(blocks.cost(kind));
    const int64_t held = span.last ? 0 : (kind == nn::CheckpointPolicy::Kind::full ? 2 : 3);
    moments.push_back(costs.back().split_extra + held * stream);
    peak = std::max(peak, kept + costs.back().kept + costs.back().backward_extra + held * stream);
    kept += costs.back().kept;
    weight += costs.back().weight;
  }
  // B runs the blocks last to first: at block k, blocks [begin, k] keep what they kept and the
  // later ones what W reads.
  int64_t split_peak = 0, before = kept, later = 0;
  for (size_t k = costs.size(); k-- > 0;) {
    split_peak = std::max(split_peak, before + later + moments[k]);
    before -= costs[k].kept;
    later += costs[k].weight;
  }
  if (span.last) {
    const int64_t moment = kept + blocks.head_moment(span.split_backward);
    peak = std::max(peak, moment);
    split_peak = std::max(split_peak, moment);
  }
  const int64_t head_held = span.last ? blocks.fused_head_held(span.split_backward) : 0;
  split_peak = std::max(split_peak, weight + weight_ends - ends);
  SpanActivations out;
  out.stream = stream;
  out.batch = 2 * 4 * N * cp.size;
  out.kept = ends + kept + head_held;
  out.peak = ends + peak;
  out.weight_kept = weight_ends + weight;
  out.split_peak = ends + split_peak;
  return out;
}

int64_t estimate_activations(const nn::ModelConfig& model, int64_t micro_batch_size,
                             int64_t seq_len, DType compute, const TensorSplit& tp,
                             const ContextSplit& cp, bool on_device) {
  const SpanActivations s =
      span_activations(model, micro_batch_size, seq_len, compute, tp, {}, cp, on_device);
  return s.batch + s.peak;
}

}  // namespace braid::parallel
