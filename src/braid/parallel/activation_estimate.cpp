#include "braid/parallel/activation_estimate.h"

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

class BlockModel {
 public:
  BlockModel(const nn::ModelConfig& m, int64_t tokens, DType compute)
      : m_(m), N_(tokens), a_(static_cast<int64_t>(dtype_size(compute))) {}

  BlockCost cost(nn::CheckpointPolicy::Kind kind) const {
    using Kind = nn::CheckpointPolicy::Kind;
    const int64_t C = m_.d_model, H = m_.d_ff;
    switch (kind) {
      case Kind::none:
        return {kept_whole(), mlp_backward()};
      case Kind::full:
        // The rerun holds the block's tensors again, its output and the incoming gradient.
        return {a_ * N_ * C, kept_whole() + mlp_backward() + a_ * N_ * 2 * C};
      case Kind::selective: {
        const int64_t kept = m_.is_gpt2() ? a_ * N_ * (4 * C + 2 * H) + 4 * N_ * 2
                                          : a_ * N_ * (4 * C + 3 * H) + 4 * N_;
        return {kept, std::max(mlp_backward(), attention_rerun() - kept)};
      }
    }
    return {};
  }

 private:
  // Everything a block without checkpointing keeps (the header's list).
  int64_t kept_whole() const {
    const int64_t C = m_.d_model, H = m_.d_ff, KV = m_.n_kv_head * m_.head_size();
    const int64_t stats = 4 * N_ * m_.n_head;  // attention's lse [B, NH, T] f32
    if (m_.is_gpt2()) return a_ * N_ * (13 * C + 2 * H) + 4 * N_ * 4 + stats;
    return a_ * N_ * (9 * C + 3 * KV + 3 * H) + 4 * N_ * 2 + stats;
  }
  // What the MLP's backward adds over the block's kept tensors.
  int64_t mlp_backward() const {
    const int64_t C = m_.d_model, H = m_.d_ff;
    return a_ * N_ * (m_.is_gpt2() ? H - C : 2 * (H - C));
  }
  // A selective block's attention rerun at its attention's backward, over what the earlier
  // blocks keep: the sublayer's tensors but its output projection's, and the gradients of the
  // block's input and output, of the attention's output and of q, k and v.
  int64_t attention_rerun() const {
    const int64_t C = m_.d_model, KV = m_.n_kv_head * m_.head_size();
    const int64_t stats = 4 * N_ * m_.n_head;
    if (m_.is_gpt2()) return a_ * N_ * (9 * C + 6 * C) + 4 * N_ * 2 + stats;
    return a_ * N_ * ((5 * C + 3 * KV) + (4 * C + 2 * KV)) + 4 * N_ + stats;
  }

  const nn::ModelConfig& m_;
  int64_t N_, a_;
};

}  // namespace

int64_t estimate_activations(const nn::ModelConfig& model, int64_t micro_batch_size,
                             int64_t seq_len, DType compute) {
  BRAID_CHECK(micro_batch_size >= 1, "estimate_activations: micro_batch_size must be >= 1, got ",
              micro_batch_size);
  BRAID_CHECK(seq_len >= 1 && seq_len <= model.max_seq_len,
              "estimate_activations: seq_len must be in [1, ", model.max_seq_len,
              "] (the model's max_seq_len), got ", seq_len);
  const int64_t N = micro_batch_size * seq_len, a = static_cast<int64_t>(dtype_size(compute));
  // The embedding's and the final norm's outputs, the ids and targets (i32).
  const int64_t outside = 2 * a * N * model.d_model + 2 * 4 * N;
  const BlockModel blocks(model, N, compute);
  const nn::CheckpointPolicy& policy = model.activation_checkpointing;
  int64_t kept = 0, peak = 0;
  for (int64_t i = 0; i < model.n_layer; ++i) {
    const BlockCost c =
        blocks.cost(policy.applies_to(i) ? policy.kind : nn::CheckpointPolicy::Kind::none);
    kept += c.kept;
    peak = std::max(peak, kept + c.backward_extra);
  }
  return outside + peak;
}

}  // namespace braid::parallel
