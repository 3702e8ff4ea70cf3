#include "braid/nn/attention.h"

#include <algorithm>

#include "braid/autograd/functions.h"
#include "braid/core/error.h"

namespace braid::nn {

Attention::Attention(const ModelConfig& cfg, float out_std, TensorParallel* tp, ContextParallel* cp)
    : is_gpt2_(cfg.is_gpt2()),
      n_head_(cfg.n_head),
      n_kv_head_(cfg.n_kv_head),
      head_size_(cfg.head_size()),
      rope_theta_(static_cast<float>(cfg.rope_theta)),
      tp_(tp),
      cp_(cp) {
  const int64_t C = cfg.d_model;
  const int ranks = tp ? tp->size() : 1;
  // kv heads: split when tp divides them, else each replicated on tp / NKV ranks (ModelConfig
  // ::validate_tensor_parallel checks that one of the two holds).
  const int kv_parts = static_cast<int>(std::min<int64_t>(n_kv_head_, ranks));
  const LinearSplit column = tp ? LinearSplit::column(tp) : LinearSplit{};
  const LinearSplit row = tp ? LinearSplit::row(tp) : LinearSplit{};
  if (is_gpt2_) {
    const LinearSplit qkv = tp ? LinearSplit::column(tp, 3) : LinearSplit{};
    c_attn_ = register_module("c_attn", std::make_unique<Linear>(C, 3 * C, true, 0.02f, qkv));
    out_proj_ = register_module("c_proj", std::make_unique<Linear>(C, C, true, out_std, row));
  } else {
    const int64_t kv = n_kv_head_ * head_size_;
    const LinearSplit kv_split = tp ? LinearSplit::column(tp, 1, kv_parts) : LinearSplit{};
    q_proj_ = register_module("q_proj", std::make_unique<Linear>(C, C, false, 0.02f, column));
    k_proj_ = register_module("k_proj", std::make_unique<Linear>(C, kv, false, 0.02f, kv_split));
    v_proj_ = register_module("v_proj", std::make_unique<Linear>(C, kv, false, 0.02f, kv_split));
    out_proj_ = register_module("o_proj", std::make_unique<Linear>(C, C, false, out_std, row));
  }
  n_head_ /= ranks;
  n_kv_head_ /= kv_parts;
  if (cp && cp->splits_heads()) {
    const std::string per_rank =
        tp ? " (" + std::to_string(n_head_) + " and " + std::to_string(n_kv_head_) +
                 " per parallel.tensor_parallel_size " + std::to_string(ranks) + " rank)"
           : "";
    BRAID_CHECK(n_head_ % cp->size() == 0 && n_kv_head_ % cp->size() == 0,
                "parallel.context_parallel_mode ulysses splits the attention heads over "
                "parallel.context_parallel_size ",
                cp->size(), ": model.n_head ", cfg.n_head, " and model.n_kv_head ", cfg.n_kv_head,
                per_rank, " must both divide by it (ring attention has no such limit)");
  }
}

Variable Attention::forward(const Variable& input) {
  // input[B, T, C], or this rank's rows [B*T/tp, C] under sequence parallelism.
  const Variable x = tp_ ? tp_->enter(input) : input;
  const int64_t T = tp_ && tp_->sequence_parallel() ? tp_->seq_len() : x.shape()[1];
  const int64_t B = x.shape().numel() / x.shape()[-1] / T;
  const int64_t NH = n_head_, NKV = n_kv_head_, HS = head_size_, C = NH * HS;
  const bool split = cp_ && cp_->active();
  // Packed rows (Note [Packed rows]): positions restart at each example, attention stays in it.
  const SequenceLayout* packed = layout_ && *layout_ ? layout_->get() : nullptr;
  BRAID_CHECK(!packed || (packed->batch == B && packed->seq_len == T && !split),
              "attention: the packed-row layout does not match the micro-batch");
  // RoPE angles of the tokens' places in the whole sequence (Note [Context-parallel layout]).
  const Tensor where = split && !is_gpt2_ ? cp_->positions(T) : Tensor();
  const auto rope = [&](const Variable& t) {
    if (!packed) return autograd::rope(t, rope_theta_, where);
    // Each token at its place in its example: the rows as one sequence of B*T tokens.
    const Shape s = t.shape();
    const Variable flat = autograd::reshape(t, Shape{1, s[0] * s[1], s[2], s[3]});
    return autograd::reshape(autograd::rope(flat, rope_theta_, packed->positions), s);
  };
  Variable q, k, v;  // [B, T, NH|NKV, HS]
  if (is_gpt2_) {
    Variable qkv = autograd::reshape((*c_attn_)(x), Shape{B, T, 3 * C});
    // Note [Packed qkv] (kernels/cpu/attention.cpp): on the host the kernels read q, k and v
    // where the projection put them; a device's kernels take them split (the simulated device
    // too, so that it runs a device's graph).
    if (!split && !packed && qkv.value().device().is_cpu())
      return (*out_proj_)(autograd::reshape(autograd::attention_qkv(qkv, NH, NH), Shape{B, T, C}));
    q = autograd::reshape(autograd::slice_last_dim(qkv, 0, C), Shape{B, T, NH, HS});
    k = autograd::reshape(autograd::slice_last_dim(qkv, C, C), Shape{B, T, NH, HS});
    v = autograd::reshape(autograd::slice_last_dim(qkv, 2 * C, C), Shape{B, T, NH, HS});
  } else {
    q = rope(autograd::reshape((*q_proj_)(x), Shape{B, T, NH, HS}));
    k = rope(autograd::reshape((*k_proj_)(x), Shape{B, T, NKV, HS}));
    v = autograd::reshape((*v_proj_)(x), Shape{B, T, NKV, HS});
  }
  Variable y = split    ? cp_->attention(q, k, v)
               : packed ? autograd::attention(q, k, v, packed->segments)
                        : autograd::attention(q, k, v);  // [B,T,NH,HS]
  return (*out_proj_)(autograd::reshape(y, Shape{B, T, C}));
}

}  // namespace braid::nn
