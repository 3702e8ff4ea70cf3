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
  BlockModel(const nn::ModelConfig& m, int64_t tokens, DType compute, int tp)
      : m_(m), N_(tokens), a_(static_cast<int64_t>(dtype_size(compute))) {
    const int64_t kv_parts = std::min<int64_t>(m.n_kv_head, tp);
    C_ = m.d_model;
    Cl_ = m.n_head / tp * m.head_size();
    KVl_ = m.n_kv_head / kv_parts * m.head_size();
    Hl_ = m.d_ff / tp;
    NHl_ = m.n_head / tp;
    row_ = tp == 1 ? 1 : (m.is_gpt2() ? 3 : 2);
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
    if (row_ == 1) return 2 * a_ * N_ * C_;
    return m_.is_gpt2() ? 5 * a_ * N_ * C_ + 4 * N_ : 3 * a_ * N_ * C_;
  }

 private:
  // Everything a block without checkpointing keeps (the header's list): the two norms' outputs
  // and the two residual sums, the projections' outputs, and their f32 statistics.
  int64_t kept_whole() const {
    const int64_t stats = 4 * N_ * NHl_;  // attention's lse [B, NHl, T] f32
    const int64_t common = 4 * C_ + 2 * row_ * C_;
    if (m_.is_gpt2()) return a_ * N_ * (common + 7 * Cl_ + 2 * Hl_) + 4 * N_ * 4 + stats;
    return a_ * N_ * (common + 3 * Cl_ + 3 * KVl_ + 3 * Hl_) + 4 * N_ * 2 + stats;
  }
  // What the MLP's backward adds over the block's kept tensors.
  int64_t mlp_backward() const { return a_ * N_ * (m_.is_gpt2() ? Hl_ - C_ : 2 * (Hl_ - C_)); }
  // A selective block's attention rerun at its attention's backward, over what the earlier
  // blocks keep: the sublayer's tensors but its output projection's, and the gradients of the
  // block's input and output, of the attention's output and of q, k and v.
  int64_t attention_rerun() const {
    const int64_t stats = 4 * N_ * NHl_;
    const int64_t common = 4 * C_ + (row_ - 1) * C_;
    if (m_.is_gpt2()) return a_ * N_ * (common + 11 * Cl_) + 4 * N_ * 2 + stats;
    return a_ * N_ * (common + 5 * Cl_ + 5 * KVl_) + 4 * N_ + stats;
  }

  const nn::ModelConfig& m_;
  int64_t N_, a_;
  int64_t C_ = 0, Cl_ = 0, KVl_ = 0, Hl_ = 0, NHl_ = 0, row_ = 1;
};

}  // namespace

int64_t estimate_activations(const nn::ModelConfig& model, int64_t micro_batch_size,
                             int64_t seq_len, DType compute, int tp, const ActivationSpan& span) {
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
  const int64_t N = micro_batch_size * seq_len;
  const int64_t stream = static_cast<int64_t>(dtype_size(compute)) * N * model.d_model;  // aNC
  const BlockModel blocks(model, N, compute, tp);
  // One micro-batch's tensors outside the blocks: the embedding's outputs on the first stage,
  // else the activations received from the previous one; the final norm's output on the last.
  int64_t ends = span.first ? blocks.outside() - stream : stream;
  if (span.last) ends += stream;
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
  // The batches' ids and targets (i32) stay for the whole step.
  return 2 * 4 * N * span.batches_held + ends + (span.in_flight - 1) * (ends + kept) + peak;
}

}  // namespace braid::parallel
