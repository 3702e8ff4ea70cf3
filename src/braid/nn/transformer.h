// Transformer: the decoder-only language model, configured as GPT-2 (learned positions,
// LayerNorm, GELU, biases, fused qkv, tied head) or LLaMA (RoPE, RMSNorm, SwiGLU, GQA, no
// biases, untied head by default) by its ModelConfig. Parameter names are HuggingFace's:
//   GPT-2: transformer.{wte,wpe}.weight, transformer.h.{i}.{ln_1,attn.c_attn,attn.c_proj,ln_2,
//          mlp.c_fc,mlp.c_proj}.{weight,bias}, transformer.ln_f.{weight,bias}
//          (+ lm_head.weight when untied)
//   LLaMA: model.embed_tokens.weight, model.layers.{i}.{input_layernorm,self_attn.{q,k,v,o}_proj,
//          post_attention_layernorm,mlp.{gate,up,down}_proj}.weight, model.norm.weight,
//          lm_head.weight (absent when tied)
// All parameters live in one FlatBuffer in that order (first use in forward). units() gives
// the FSDP units as flat ranges: "embeddings", "block.0" ... "block.{L-1}", "head" (final
// norm + untied lm_head). With tied embeddings the head reuses the token embedding, which
// lives in the "embeddings" unit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "braid/nn/block.h"
#include "braid/nn/embedding.h"
#include "braid/nn/flat_buffer.h"
#include "braid/nn/linear.h"
#include "braid/nn/model_config.h"

namespace braid::nn {

struct TransformerOptions {
  uint64_t seed = 0;
  bool init_weights = true;    // false: parameters stay zero (an import fills them)
  bool allocate_grads = true;  // false: no gradient buffer (inference)
};

struct ModelUnit {
  std::string name;
  std::vector<Module*> modules;
  FlatRange range;
};

class Transformer : public Module {
 public:
  explicit Transformer(const ModelConfig& cfg, const TransformerOptions& opts = {});

  const ModelConfig& config() const { return cfg_; }
  FlatBuffer& flat() { return flat_; }
  const FlatBuffer& flat() const { return flat_; }
  const std::vector<ModelUnit>& units() const { return units_; }
  size_t num_blocks() const { return blocks_->size(); }
  Block& block(size_t i) { return (*blocks_)[i]; }
  Variable& token_embedding() { return wte_->weight(); }
  Variable& head_weight();  // lm_head.weight, or the token embedding when tied

  // ids[B,T] i32 -> the final norm's output [B,T,C].
  Variable hidden(const Tensor& ids);
  // Summed next-token cross-entropy over targets[B,T] (i32; ignore_index rows skipped)
  // divided by `denominator` (0: the number of counted targets, i.e. the mean). A scalar [1].
  Variable loss(const Tensor& ids, const Tensor& targets, double denominator = 0.0,
                int32_t ignore_index = -100);
  // logits[B,T,V] f32, computed without recording (generation, evaluation).
  Tensor logits(const Tensor& ids);

  void init_weights(uint64_t seed) { flat_.init(seed); }
  void zero_grad() { flat_.zero_grad(); }
  void set_activation_checkpointing(bool on) { cfg_.activation_checkpointing = on; }
  bool activation_checkpointing() const { return cfg_.activation_checkpointing; }

 private:
  void check_ids(const Tensor& ids, const char* what) const;

  ModelConfig cfg_;
  Embedding* wte_ = nullptr;
  Embedding* wpe_ = nullptr;  // GPT-2 only
  ModuleList<Block>* blocks_ = nullptr;
  UnaryModule* final_norm_ = nullptr;
  Linear* lm_head_ = nullptr;  // null when tied
  FlatBuffer flat_;
  std::vector<ModelUnit> units_;
};

}  // namespace braid::nn
