#include "braid/parallel/estimate/activation_estimate.h"

#include <algorithm>

#include "braid/core/error.h"

namespace braid::parallel {

namespace {

// Bytes one block keeps and the most it adds while backward runs through it, Note [Activation
// peak].
struct BlockCost {
  int64_t kept = 0;
  int64_t backward_extra = 0;
};

// Sizes per token, in elements: C the residual stream, and what tp rank 0 holds of the
// attention (Cl = its heads' width, KVl its kv heads', NHl its heads) and the MLP (Hl).
// `row` is what a row-parallel projection leaves per token: its output, and under tensor
// parallelism also the all-reduced copy (and GPT-2's bias added after it).
class BlockModel {
 public:
  BlockModel(const nn::ModelConfig& m, int64_t tokens, DType compute, int tp,
             const ContextSplit& cp)
      : m_(m), N_(tokens), a_(static_cast<int64_t>(dtype_size(compute))), cp_(cp) {
    const int64_t kv_parts = std::min<int64_t>(m.n_kv_head, tp);
    C_ = m.d_model;
    Cl_ = m.n_head / tp * m.head_size();
    KVl_ = m.n_kv_head / kv_parts * m.head_size();
    Hl_ = m.d_ff / tp;
    NHl_ = m.n_head / tp;
    row_ = tp == 1 ? 1 : (m.is_gpt2() ? 3 : 2);
    // Ulysses: the head-split copies of q, k, v and of the output, kept beside the token-split
    // ones (Note [Context-parallel activations]).
    if (cp.size > 1 && cp.ulysses) heads_ = 2 * Cl_ + 2 * KVl_;
  }

  BlockCost cost(nn::CheckpointPolicy::Kind kind) const {
    using Kind = nn::CheckpointPolicy::Kind;
    switch (kind) {
      case Kind::none:
        return {kept_whole(), mlp_backward()};
      case Kind::full:
        // The rerun holds the block's tensors again, its output and the incoming gradient.
        return {a_ * N_ * C_, kept_whole() + mlp_backward() + a_ * N_ * 2 * C_};
      case Kind::selective: {
        // The residual stream (h, the MLP's output sum), norm2 and the MLP.
        const int64_t kept = m_.is_gpt2() ? a_ * N_ * (3 * C_ + row_ * C_ + 2 * Hl_) + 4 * N_ * 2
                                          : a_ * N_ * (3 * C_ + row_ * C_ + 3 * Hl_) + 4 * N_;
        return {kept, std::max(mlp_backward(), attention_rerun() - kept)};
      }
    }
    return {};
  }

  // Outside the blocks: the embedding's output (under tensor parallelism also its all-reduced
  // copy, and GPT-2's position rows, their sum and the positions) and the final norm's.
  int64_t outside() const {
    // Under context parallelism GPT-2 looks up its position rows apart (at the tokens' places in
    // the whole sequence) and adds them: both lookups are kept, and their sum.
    if (row_ == 1) return (m_.is_gpt2() && cp_.size > 1 ? 4 : 2) * a_ * N_ * C_;
    return m_.is_gpt2() ? 5 * a_ * N_ * C_ + 4 * N_ : 3 * a_ * N_ * C_;
  }

 private:
  // Everything a block without checkpointing keeps (the header's list): the two norms' outputs
  // and the two residual sums, the projections' outputs, and their f32 statistics.
  int64_t kept_whole() const {
    const int64_t stats = 4 * N_ * NHl_;  // attention's lse [B, NHl, T] f32
    const int64_t common = 4 * C_ + 2 * row_ * C_;
    if (m_.is_gpt2()) return a_ * N_ * (common + 7 * Cl_ + 2 * Hl_ + heads_) + 4 * N_ * 4 + stats;
    return a_ * N_ * (common + 3 * Cl_ + 3 * KVl_ + 3 * Hl_ + heads_) + 4 * N_ * 2 + stats;
  }
  // What the MLP's backward adds over the block's kept tensors.
  int64_t mlp_backward() const { return a_ * N_ * (m_.is_gpt2() ? Hl_ - C_ : 2 * (Hl_ - C_)); }
  // A selective block's attention rerun at its attention's backward, over what the earlier
  // blocks keep: the sublayer's tensors but its output projection's, and the gradients of the
  // block's input and output, of the attention's output and of q, k and v.
  int64_t attention_rerun() const {
    const int64_t stats = 4 * N_ * NHl_;
    const int64_t common = 4 * C_ + (row_ - 1) * C_;
    if (m_.is_gpt2()) return a_ * N_ * (common + 11 * Cl_) + 4 * N_ * 2 + stats + context();
    return a_ * N_ * (common + 5 * Cl_ + 5 * KVl_) + 4 * N_ + stats + context();
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
  int64_t C_ = 0, Cl_ = 0, KVl_ = 0, Hl_ = 0, NHl_ = 0, row_ = 1, heads_ = 0;
};

}  // namespace

int64_t estimate_activations(const nn::ModelConfig& model, int64_t micro_batch_size,
                             int64_t seq_len, DType compute, int tp, const ActivationSpan& span,
                             const ContextSplit& cp) {
  BRAID_CHECK(micro_batch_size >= 1, "estimate_activations: micro_batch_size must be >= 1, got ",
              micro_batch_size);
  BRAID_CHECK(seq_len >= 1 && seq_len <= model.max_seq_len,
              "estimate_activations: seq_len must be in [1, ", model.max_seq_len,
              "] (the model's max_seq_len), got ", seq_len);
  BRAID_CHECK(tp >= 1, "estimate_activations: tensor_parallel_size must be >= 1, got ", tp);
  const int64_t end = span.end < 0 ? model.n_layer : span.end;
  BRAID_CHECK(span.begin >= 0 && span.begin < end && end <= model.n_layer && span.in_flight >= 1,
              "estimate_activations: blocks [", span.begin, ", ", end, ") of ", model.n_layer,
              " with ", span.in_flight, " micro-batches in flight");
  BRAID_CHECK(cp.size >= 1, "estimate_activations: context_parallel_size must be >= 1, got ",
              cp.size);
  const int64_t split = cp.size == 1 ? 1 : (cp.ulysses ? cp.size : 2 * cp.size);
  BRAID_CHECK(seq_len % split == 0, "estimate_activations: seq_len ", seq_len,
              " does not split over context_parallel_size ", cp.size, " (",
              cp.ulysses ? "ulysses: a multiple of it" : "ring: a multiple of 2 x it", ")");
  const int64_t N = micro_batch_size * seq_len / cp.size;  // this rank's tokens
  const int64_t stream = static_cast<int64_t>(dtype_size(compute)) * N * model.d_model;  // aNC
  const BlockModel blocks(model, N, compute, tp, cp);
  // One micro-batch's tensors outside the blocks: the embedding's outputs on the first stage,
  // else the activations received from the previous one; the final norm's output on the last.
  int64_t ends = span.first ? blocks.outside() - stream : stream;
  if (span.last) ends += stream;
  // Under context parallelism the rank's own tokens of the ids (first stage) and the targets
  // (last), i32.
  if (cp.size > 1) ends += 4 * N * (span.first + span.last);
  // Its blocks' tensors, and the most its backward adds: inside a block (Note [Activation
  // peak]), or the final norm's backward before any block's (the gradients of its input and
  // output). The block moments are those of one whole model, measured with the final norm's
  // output (counted in `ends`) alive. A stage before the last holds the residual stream three
  // more times instead: its output (the root of its backward) and the gradient it received for
  // it stay alive throughout, where one model frees both early in its last block's backward (a
  // rerun block holds that gradient anyway: two), and no final norm's output. A receive posted
  // while backward runs (the next gradient; the last stage of a 1f1b pipeline: the next
  // micro-batch's activations) holds one more.
  const nn::CheckpointPolicy& policy = model.activation_checkpointing;
  int64_t kept = 0, peak = 0;
  for (int64_t i = span.begin; i < end; ++i) {
    const auto kind = policy.applies_to(i) ? policy.kind : nn::CheckpointPolicy::Kind::none;
    const BlockCost c = blocks.cost(kind);
    kept += c.kept;
    const int64_t held = span.last ? 0 : (kind == nn::CheckpointPolicy::Kind::full ? 2 : 3);
    peak = std::max(peak, kept + c.backward_extra + held * stream);
  }
  if (span.last) peak = std::max(peak, kept + 2 * stream);
  if (span.receives_during_backward) peak += stream;
  // The batches' ids and targets (i32, whole sequences) stay for the whole step.
  return 2 * 4 * N * cp.size * span.batches_held + ends + (span.in_flight - 1) * (ends + kept) +
         peak;
}

}  // namespace braid::parallel
