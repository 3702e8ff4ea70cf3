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
#include "braid/nn/embedding.h"
#include "braid/nn/flat_buffer.h"
#include "braid/nn/lm_head.h"
#include "braid/nn/model.h"
#include "braid/nn/model_config.h"
#include "braid/nn/param_layout.h"

namespace braid::nn {

// Note [Pipeline stage]: a pipeline stage declares the whole model (names and global indices
// stay those of one process) but its layout() holds only its units: the blocks of its chunks,
// the embeddings on the first stage, the final norm and LM head on the last. With tied
// embeddings the last stage also holds a replica of the "embeddings" unit for its LM head (as
// Megatron's embedding group does): the pipeline strategy sums the token table's gradient over
// the first and last stage, so both copies take the same steps; the replica counts nowhere in
// the global norm, and its position table (GPT-2), which the head does not read, is frozen.
struct PipelineStage {
  std::vector<std::pair<int64_t, int64_t>> chunks;  // block ranges [begin, end), increasing
  bool first = false;  // holds the embeddings (the first virtual stage is here)
  bool last = false;   // holds the final norm and the LM head (the last virtual stage)
};

struct TransformerOptions {
  uint64_t seed = 0;
  bool init_weights = true;    // false: parameters stay zero (an import fills them)
  bool allocate_grads = true;  // false: no gradient buffer (inference)
  bool materialize = true;     // false: declared only (a strategy materialises it)
  // Tensor parallelism (Note [Tensor-parallel layout]): declare this rank's slices. The object
  // must outlive the model.
  TensorParallel* tensor_parallel = nullptr;
  // Pipeline parallelism: the part of the model this rank holds (Note [Pipeline stage]).
  std::optional<PipelineStage> pipeline = std::nullopt;
};

class Transformer : public Model {
 public:
  explicit Transformer(const ModelConfig& cfg, const TransformerOptions& opts = {});

  const ModelConfig& config() const { return cfg_; }
  // layout() (Model): what this rank holds. full_layout(): the model declared whole.
  const ParamLayout& full_layout() const override { return full_ ? full_->layout() : layout(); }
  TensorParallel* tensor_parallel() const { return tp_; }
  const std::optional<PipelineStage>& pipeline_stage() const { return stage_; }
  // The index in full_layout() of this rank's unit u (layout().units()[u]); u without a pipeline.
  int global_unit(int u) const override { return global_units_.empty() ? u : global_units_.at(u); }
  // Whether this rank holds the (real) token embeddings / the final norm and LM head.
  bool holds_embeddings() const { return !stage_ || stage_->first; }
  bool holds_head() const { return !stage_ || stage_->last; }
  size_t num_blocks() const { return blocks_->size(); }
  Block& block(size_t i) { return (*blocks_)[i]; }
  Variable& token_embedding() { return wte_->weight(); }
  LmHead& lm_head() { return *lm_head_; }
  Variable& head_weight() { return lm_head_->weight(); }  // lm_head.weight, or wte when tied

  // ids[B,T] i32 -> the final norm's output [B,T,C].
  Variable hidden(const Tensor& ids);
  // The pieces of a forward, for a pipeline stage. begin_forward checks ids and tells tensor
  // parallelism the micro-batch's sequence length: every stage calls it once per micro-batch
  // before its other pieces. embed: ids -> the residual stream [B, T, C] (or this rank's rows
  // under sequence parallelism); run_blocks: blocks [begin, end) with their checkpoint policy;
  // head_loss: the final norm, LM head and loss (as loss()); head_logits: the logits of x's rows
  // [N, V] f32 without recording.
  void begin_forward(const Tensor& ids);
  Variable embed(const Tensor& ids);
  Variable run_blocks(Variable x, int64_t begin, int64_t end);
  Variable head_loss(const Variable& x, const Tensor& targets, double denominator = 0.0,
                     int32_t ignore_index = -100);
  Tensor head_logits(const Variable& x);
  // Summed next-token cross-entropy over targets[B,T] (i32; ignore_index rows skipped)
  // divided by `denominator` (0: the number of counted targets, i.e. the mean). A scalar [1].
  Variable loss(const Tensor& ids, const Tensor& targets, double denominator = 0.0,
                int32_t ignore_index = -100);
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
  void declare_stage(const PipelineStage& stage, const std::vector<UnitDecl>& units);
  // The whole model's forward up to the final norm: begin_forward, embed, every block.
  Variable trunk(const Tensor& ids);

  ModelConfig cfg_;
  Embedding* wte_ = nullptr;
  Embedding* wpe_ = nullptr;  // GPT-2 only
  ModuleList<Block>* blocks_ = nullptr;
  UnaryModule* final_norm_ = nullptr;
  LmHead* lm_head_ = nullptr;
  TensorParallel* tp_ = nullptr;
  std::unique_ptr<Transformer> full_;  // with tp or pp: the model declared whole (no memory)
  std::optional<PipelineStage> stage_;
  std::vector<int> global_units_;  // with pp: layout() unit -> full_layout() unit
};

}  // namespace braid::nn
