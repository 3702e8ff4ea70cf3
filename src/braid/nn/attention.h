// Causal self-attention. GPT-2: fused "c_attn" Linear [3C, C] (+bias) split into q, k, v with
// slice_last_dim, "c_proj" [C, C]. LLaMA: "q_proj" [C, C], "k_proj"/"v_proj" [NKV*HS, C],
// RoPE on q and k, grouped-query attention (query head h reads kv head h / (NH / NKV)),
// "o_proj" [C, C]; no biases. Input and output x[B, T, C].
#pragma once

#include <memory>

#include "braid/nn/context_parallel.h"
#include "braid/nn/linear.h"
#include "braid/nn/model_config.h"
#include "braid/nn/sequence_layout.h"

namespace braid::nn {

class Attention : public UnaryModule {
 public:
  // out_std: init std of the output projection (GPT-2 scales residual projections). With tp,
  // this rank's heads (Note [Tensor-parallel layout], tensor_parallel.h). With cp, the input is
  // this rank's tokens and attention runs across the cp ranks (Note [Context-parallel layout]).
  Attention(const ModelConfig& cfg, float out_std, TensorParallel* tp = nullptr,
            ContextParallel* cp = nullptr);
  // Where the current micro-batch's packed-row layout is (Note [Packed rows]); null or an empty
  // pointer: plain causal rows.
  void set_layout_source(const std::shared_ptr<const SequenceLayout>* source) { layout_ = source; }

 protected:
  Variable forward(const Variable& x) override;

 private:
  bool is_gpt2_;
  int64_t n_head_, n_kv_head_, head_size_;  // this rank's heads
  float rope_theta_;
  TensorParallel* tp_;
  ContextParallel* cp_;
  const std::shared_ptr<const SequenceLayout>* layout_ = nullptr;
  Linear* c_attn_ = nullptr;  // GPT-2
  Linear* q_proj_ = nullptr;  // LLaMA
  Linear* k_proj_ = nullptr;
  Linear* v_proj_ = nullptr;
  Linear* out_proj_ = nullptr;  // c_proj / o_proj
};

}  // namespace braid::nn
