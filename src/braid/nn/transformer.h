// Transformer: the decoder-only language model, configured as GPT-2 (learned positions,
// LayerNorm, GELU, biases, fused qkv, tied head) or LLaMA (RoPE, RMSNorm, SwiGLU, GQA, no
// biases, untied head by default) by its ModelConfig. Parameter names are HuggingFace's:
//   GPT-2: transformer.{wte,wpe}.weight, transformer.h.{i}.{ln_1,attn.c_attn,attn.c_proj,ln_2,
//          mlp.c_fc,mlp.c_proj}.{weight,bias}, transformer.ln_f.{weight,bias}
//          (+ lm_head.weight when untied)
//   LLaMA: model.embed_tokens.weight, model.layers.{i}.{input_layernorm,self_attn.{q,k,v,o}_proj,
//          post_attention_layernorm,mlp.{gate,up,down}_proj}.weight, model.norm.weight,
//          lm_head.weight (absent when tied)
// layout() gives the parameters in that order (first use in forward) grouped into the FSDP
// units "embeddings", "block.0" ... "block.{L-1}", "head" (final norm + lm_head). The LM head
// is always a module; tied, it borrows the token embedding, which lives in the "embeddings"
// unit (the head is then one of that unit's users).
//
// Declare, then materialise (docs/design.md): with TransformerOptions::materialize (the default)
// the constructor puts the whole model in one FlatBuffer; without it the model is only
// declared and a strategy (parallel/) decides what this rank holds.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "braid/nn/block.h"
#include "braid/nn/context_parallel.h"
#include "braid/nn/embedding.h"
#include "braid/nn/flat_buffer.h"
#include "braid/nn/lm_head.h"
#include "braid/nn/model_config.h"
#include "braid/nn/param_layout.h"
#include "braid/nn/sequence_layout.h"
#include "braid/nn/staged_model.h"

namespace braid::nn {

struct TransformerOptions {
  uint64_t seed = 0;
  bool init_weights = true;    // false: parameters stay zero (an import fills them)
  bool allocate_grads = true;  // false: no gradient buffer (inference)
  bool materialize = true;     // false: declared only (a strategy materialises it)
  // Tensor parallelism (Note [Tensor-parallel layout]): declare this rank's slices. The object
  // must outlive the model.
  TensorParallel* tensor_parallel = nullptr;
  // Context parallelism (Note [Context-parallel layout]): forwards keep this rank's tokens of
  // the whole micro-batches they are given. The object must outlive the model.
  ContextParallel* context_parallel = nullptr;
  // Pipeline parallelism: the part of the model this rank holds (Note [Pipeline stage],
  // staged_model.h; the same as keep_stage() after construction).
  std::optional<PipelineStage> pipeline = std::nullopt;
};

class Transformer : public StagedModel {
 public:
  explicit Transformer(const ModelConfig& cfg, const TransformerOptions& opts = {});

  const ModelConfig& config() const { return cfg_; }
  // layout() (Model): what this rank holds. full_layout(): the model declared whole (and
  // unsplit under tensor parallelism).
  const ParamLayout& full_layout() const override {
    return full_ ? full_->layout() : StagedModel::full_layout();
  }
  TensorParallel* tensor_parallel() const { return tp_; }
  ContextParallel* context_parallel() const { return cp_; }
  // Whether this rank holds the (real) token embeddings / the final norm and LM head.
  bool holds_embeddings() const { return holds_first(); }
  bool holds_head() const { return holds_last(); }
  int64_t num_layers() const override { return cfg_.n_layer; }
  size_t num_blocks() const { return blocks_->size(); }
  Block& block(size_t i) { return (*blocks_)[i]; }
  Variable& token_embedding() { return wte_->weight(); }
  LmHead& lm_head() { return *lm_head_; }
  Variable& head_weight() { return lm_head_->weight(); }  // lm_head.weight, or wte when tied

  // ids[B,T] i32 -> the final norm's output [B,T,C].
  Variable hidden(const Tensor& ids);
  // The pieces of a forward (StagedModel), for a pipeline stage. begin_forward checks ids and
  // tells tensor parallelism the micro-batch's sequence length; embed: ids -> the residual
  // stream [B, T, C] (or this rank's rows under sequence parallelism); run_layers: blocks
  // [begin, end) with their checkpoint policy; head_loss: the final norm, LM head and loss (as
  // loss()); head_logits: the logits of x's rows [N, V] f32 without recording.
  void begin_forward(const Tensor& ids) override;
  Variable embed(const Tensor& ids) override;
  Variable run_layers(Variable x, int64_t begin, int64_t end) override;
  Variable head_loss(const Variable& x, const Tensor& targets, double denominator = 0.0) override;
  Tensor head_logits(const Variable& x);
  // Summed next-token cross-entropy over targets[B,T] (i32; rows of -100 skipped) divided by
  // `denominator` (0: the number of counted targets, i.e. the mean). A scalar [1].
  Variable loss(const Tensor& ids, const Tensor& targets, double denominator = 0.0) override;
  // Note [Packed rows] (sequence_layout.h): forwards from now on treat the rows as packed
  // examples at these positions ([B, T] i32, host); an undefined tensor: plain rows again.
  void set_packed_positions(const Tensor& positions) override;
  std::vector<std::string> tied_parameters() const override;
  std::optional<int64_t> activation_width() const override { return cfg_.d_model; }
  // logits[B,T,V] f32, computed without recording (generation, evaluation).
  Tensor logits(const Tensor& ids);
  // The logits [1, V] f32 of the last position of ids [1, T], without recording (generation);
  // head_last_logits: the same from the last block's output for them.
  Tensor last_logits(const Tensor& ids);
  Tensor head_last_logits(const Variable& x);

  // What backward recomputes (Note [Checkpoint policies], transformer.cpp); a bool sets the
  // old on/off switch (true = full, every block). Takes effect at the next forward.
  void set_activation_checkpointing(const CheckpointPolicy& policy);
  const CheckpointPolicy& activation_checkpointing() const { return cfg_.activation_checkpointing; }

 private:
  void check_ids(const Tensor& ids, const char* what) const;
  bool splits_context() const;  // a cp split is active (Note [Context-parallel layout])
  void freeze_replica_extras() override;
  // The whole model's forward up to the final norm: begin_forward, embed, every block.
  Variable trunk(const Tensor& ids);

  ModelConfig cfg_;
  Embedding* wte_ = nullptr;
  Embedding* wpe_ = nullptr;  // GPT-2 only
  ModuleList<Block>* blocks_ = nullptr;
  UnaryModule* final_norm_ = nullptr;
  LmHead* lm_head_ = nullptr;
  TensorParallel* tp_ = nullptr;
  ContextParallel* cp_ = nullptr;
  std::unique_ptr<Transformer> full_;             // with tp: the model declared whole (no memory)
  std::shared_ptr<const SequenceLayout> layout_;  // packed rows, or none
};

}  // namespace braid::nn
