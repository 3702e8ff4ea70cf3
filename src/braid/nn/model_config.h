// ModelConfig: the shape of a decoder-only transformer, GPT-2 or LLaMA family, read from and
// written to HuggingFace config.json field names, or taken from a named preset.
//
// GPT-2 fields: model_type "gpt2", vocab_size, n_positions, n_embd, n_layer, n_head, n_inner,
// layer_norm_epsilon, activation_function ("gelu_new"/"gelu_pytorch_tanh"), tie_word_embeddings.
// LLaMA fields: model_type "llama", vocab_size, hidden_size, intermediate_size,
// num_hidden_layers, num_attention_heads, num_key_value_heads, rms_norm_eps, rope_theta,
// max_position_embeddings, tie_word_embeddings, hidden_act ("silu").
// Fields HF writes that do not change the math (dropouts, token ids, torch_dtype, ...) are
// accepted; fields that would change it to something braid does not implement (rope_scaling,
// attention_bias, ...) and unknown fields are errors naming the field.
#pragma once

#include <concepts>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace braid::nn {

enum class ModelArch { gpt2, llama };

// What backward recomputes instead of keeping (Note [Checkpoint policies], transformer.cpp).
// The config value of model.activation_checkpointing: "none" (or "false"); "full" (or
// "true"): rerun the whole block; "selective": keep the residual stream and the MLP's
// activations, rerun the attention sublayer (Note [Selective recompute], block.cpp).
// Block i follows the policy when i % interval == 0 ("every k-th block"); the others keep
// all their activations.
struct CheckpointPolicy {
  enum class Kind { none, full, selective };
  Kind kind = Kind::none;
  int64_t interval = 1;

  CheckpointPolicy() = default;
  CheckpointPolicy(Kind k, int64_t every = 1) : kind(k), interval(every) {}
  // The boolean model.activation_checkpointing of older configs: true = full, every block.
  // Implicit so `cfg.activation_checkpointing = true` keeps working; only a bool converts.
  template <std::same_as<bool> B>
  CheckpointPolicy(B on) : kind(on ? Kind::full : Kind::none) {}

  // "none" | "false" | "full" | "true" | "selective" and interval >= 1; anything else throws
  // braid::Error naming the value.
  static CheckpointPolicy parse(std::string_view kind, int64_t interval = 1);
  static std::string_view kind_name(Kind k);  // "none", "full", "selective"

  bool is_enabled() const { return kind != Kind::none; }
  // Whether block `i` (0-based) recomputes anything in backward.
  bool applies_to(int64_t i) const { return is_enabled() && i % interval == 0; }
  void validate() const;    // throws unless interval >= 1
  std::string str() const;  // "none", "full", "selective every 2"
  bool operator==(const CheckpointPolicy&) const = default;
};

struct ModelConfig {
  ModelArch arch = ModelArch::gpt2;
  int64_t vocab_size = 50257;
  int64_t max_seq_len = 1024;  // n_positions / max_position_embeddings
  int64_t d_model = 768;       // n_embd / hidden_size
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_kv_head = 12;  // GQA key/value heads (= n_head for GPT-2)
  int64_t d_ff = 3072;     // MLP hidden width: n_inner (default 4 * n_embd) / intermediate_size
  double norm_eps = 1e-5;  // layer_norm_epsilon / rms_norm_eps
  double rope_theta = 10000.0;
  bool tie_word_embeddings = true;
  int64_t bos_token_id = -1;  // -1: not set; carried through config.json round trips
  int64_t eos_token_id = -1;
  // braid-only (not part of config.json): what backward recomputes.
  CheckpointPolicy activation_checkpointing;

  bool is_gpt2() const { return arch == ModelArch::gpt2; }
  bool is_llama() const { return arch == ModelArch::llama; }
  bool has_bias() const { return is_gpt2(); }
  int64_t head_size() const { return d_model / n_head; }
  std::string_view model_type() const { return is_gpt2() ? "gpt2" : "llama"; }

  // Throws naming the field and the numbers when the shape is inconsistent.
  void validate() const;
  // Throws naming the field when the model cannot be split over tp tensor-parallel ranks (the
  // vocabulary is padded instead: Note [Tensor-parallel layout]).
  void validate_tensor_parallel(int tp) const;
  // Closed form of the number of parameters (tied embeddings counted once).
  int64_t num_parameters() const;
  // Note [MFU formula]: model FLOPs per trained token = 6 N + 12 L T C (PaLM appendix B, as
  // nanoGPT's estimate_mfu): 6 N for the forward (2 N) and backward (4 N) matrix multiplies over
  // the N parameters that take part in matmuls (LM head included, embedding lookups and the
  // position table excluded), and 12 L T C for the attention scores and weighted sums (not
  // halved for the causal mask, by the same convention). Recomputation from activation
  // checkpointing is not counted (MFU, not HFU). The trainer's MFU and the planner's use it.
  double flops_per_token(int64_t seq_len) const;
  std::string summary() const;  // "gpt2: 12 layers, 12 heads, d_model 768, ..."
  // Every field that shapes the model's tensors and work, as a short string (a cache key; not
  // the checkpointing policy).
  std::string shape_key() const;

  static ModelConfig from_hf_json(std::string_view json_text,
                                  std::string_view source = "config.json");
  static ModelConfig from_hf_file(const std::filesystem::path& path);
  std::string to_hf_json() const;  // pretty-printed config.json text
  void save_hf_file(const std::filesystem::path& path) const;

  // gpt2-tiny, gpt2-small (124M), gpt2-medium, gpt2-large, gpt2-xl, bench-small,
  // llama-tiny, llama-7b. Unknown names throw listing the known ones.
  static ModelConfig preset(std::string_view name);
  static std::vector<std::string> preset_names();
};

}  // namespace braid::nn
