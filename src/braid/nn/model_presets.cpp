// Named model shapes (ModelConfig::preset). The GPT-2 sizes are OpenAI's; llama-7b is
// Llama-2-7B's config.json.
#include <sstream>

#include "braid/core/error.h"
#include "braid/nn/model_config.h"

namespace braid::nn {

namespace {

ModelConfig gpt2(int64_t vocab, int64_t positions, int64_t d_model, int64_t layers, int64_t heads) {
  ModelConfig c;
  c.arch = ModelArch::gpt2;
  c.vocab_size = vocab;
  c.max_seq_len = positions;
  c.d_model = d_model;
  c.n_layer = layers;
  c.n_head = heads;
  c.n_kv_head = heads;
  c.d_ff = 4 * d_model;
  c.norm_eps = 1e-5;
  c.tie_word_embeddings = true;
  return c;
}

ModelConfig llama(int64_t vocab, int64_t positions, int64_t d_model, int64_t d_ff, int64_t layers,
                  int64_t heads, int64_t kv_heads) {
  ModelConfig c;
  c.arch = ModelArch::llama;
  c.vocab_size = vocab;
  c.max_seq_len = positions;
  c.d_model = d_model;
  c.d_ff = d_ff;
  c.n_layer = layers;
  c.n_head = heads;
  c.n_kv_head = kv_heads;
  c.norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = false;
  return c;
}

struct Preset {
  const char* name;
  ModelConfig (*make)();
};

const Preset kPresets[] = {
    {"gpt2-tiny", [] { return gpt2(1024, 128, 64, 2, 4); }},
    {"gpt2-small",
     [] {
       auto c = gpt2(50257, 1024, 768, 12, 12);
       c.bos_token_id = c.eos_token_id = 50256;
       return c;
     }},
    {"gpt2-medium",
     [] {
       auto c = gpt2(50257, 1024, 1024, 24, 16);
       c.bos_token_id = c.eos_token_id = 50256;
       return c;
     }},
    {"gpt2-large",
     [] {
       auto c = gpt2(50257, 1024, 1280, 36, 20);
       c.bos_token_id = c.eos_token_id = 50256;
       return c;
     }},
    {"gpt2-xl",
     [] {
       auto c = gpt2(50257, 1024, 1600, 48, 25);
       c.bos_token_id = c.eos_token_id = 50256;
       return c;
     }},
    {"bench-small", [] { return gpt2(8192, 256, 384, 6, 6); }},
    {"llama-tiny", [] { return llama(1024, 128, 64, 176, 2, 4, 2); }},
    {"llama-7b",
     [] {
       auto c = llama(32000, 4096, 4096, 11008, 32, 32, 32);
       c.bos_token_id = 1;
       c.eos_token_id = 2;
       return c;
     }},
};

}  // namespace

ModelConfig ModelConfig::preset(std::string_view name) {
  for (const auto& p : kPresets) {
    if (name == p.name) return p.make();
  }
  std::ostringstream known;
  for (const auto& p : kPresets) known << (&p == kPresets ? "" : ", ") << p.name;
  BRAID_THROW("unknown model preset '", name, "' (known: ", known.str(), ")");
}

std::vector<std::string> ModelConfig::preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.name);
  return names;
}

}  // namespace braid::nn
