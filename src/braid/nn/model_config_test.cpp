#include "braid/nn/model_config.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "braid/core/error.h"

namespace braid::nn {
namespace {

std::string error_of(const std::string& text) {
  try {
    ModelConfig::from_hf_json(text, "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, ParsesTheGoldenGpt2Config) {
  auto c = ModelConfig::from_hf_file(std::filesystem::path(BRAID_TESTDATA_DIR) / "gpt2-tiny" /
                                     "config.json");
  EXPECT_TRUE(c.is_gpt2());
  EXPECT_EQ(c.vocab_size, 97);
  EXPECT_EQ(c.max_seq_len, 16);
  EXPECT_EQ(c.d_model, 32);
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_kv_head, 4);
  EXPECT_EQ(c.d_ff, 128);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-5);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 96);
}

TEST(ModelConfig, ParsesTheGoldenLlamaConfig) {
  auto c = ModelConfig::from_hf_file(std::filesystem::path(BRAID_TESTDATA_DIR) / "llama-tiny" /
                                     "config.json");
  EXPECT_TRUE(c.is_llama());
  EXPECT_EQ(c.vocab_size, 101);
  EXPECT_EQ(c.d_model, 32);
  EXPECT_EQ(c.d_ff, 64);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_kv_head, 2);
  EXPECT_EQ(c.head_size(), 8);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
}

TEST(ModelConfig, RoundTripsThroughHfJson) {
  for (const auto& name : ModelConfig::preset_names()) {
    ModelConfig a = ModelConfig::preset(name);
    ModelConfig b = ModelConfig::from_hf_json(a.to_hf_json(), name);
    EXPECT_EQ(b.arch, a.arch) << name;
    EXPECT_EQ(b.vocab_size, a.vocab_size) << name;
    EXPECT_EQ(b.max_seq_len, a.max_seq_len) << name;
    EXPECT_EQ(b.d_model, a.d_model) << name;
    EXPECT_EQ(b.n_layer, a.n_layer) << name;
    EXPECT_EQ(b.n_head, a.n_head) << name;
    EXPECT_EQ(b.n_kv_head, a.n_kv_head) << name;
    EXPECT_EQ(b.d_ff, a.d_ff) << name;
    EXPECT_DOUBLE_EQ(b.norm_eps, a.norm_eps) << name;
    EXPECT_DOUBLE_EQ(b.rope_theta, a.rope_theta) << name;
    EXPECT_EQ(b.tie_word_embeddings, a.tie_word_embeddings) << name;
    EXPECT_EQ(b.bos_token_id, a.bos_token_id) << name;
    EXPECT_EQ(b.num_parameters(), a.num_parameters()) << name;
  }
}

TEST(ModelConfig, PresetsHaveTheKnownParameterCounts) {
  EXPECT_EQ(ModelConfig::preset("gpt2-small").num_parameters(), 124439808);  // HF gpt2
  EXPECT_EQ(ModelConfig::preset("llama-7b").num_parameters(), 6738415616);   // Llama-2-7b
  auto b = ModelConfig::preset("bench-small");
  EXPECT_EQ(b.n_layer, 6);
  EXPECT_EQ(b.n_head, 6);
  EXPECT_EQ(b.d_model, 384);
  EXPECT_EQ(b.vocab_size, 8192);
  EXPECT_EQ(b.max_seq_len, 256);
  try {
    ModelConfig::preset("gpt3");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gpt2-small"), std::string::npos) << e.what();
  }
}

TEST(ModelConfig, ErrorsNameTheField) {
  EXPECT_NE(error_of(R"({"model_type":"gpt2","n_embdd":32})").find("unknown field 'n_embdd'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"gpt2","n_embd":"32"})").find("'n_embd' must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"gpt2","n_embd":30,"n_head":4})").find("divisible"),
            std::string::npos);
  EXPECT_NE(
      error_of(R"({"model_type":"gpt2","activation_function":"relu"})").find("activation_function"),
      std::string::npos);
  EXPECT_NE(
      error_of(R"({"model_type":"llama","rope_scaling":{"type":"linear"}})").find("rope_scaling"),
      std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"llama","hidden_size":64,"num_attention_heads":4,)"
                     R"("num_key_value_heads":3})")
                .find("n_kv_head 3"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"bert"})").find("'model_type' = \"bert\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"vocab_size":3})").find("model_type"), std::string::npos);
  EXPECT_NE(error_of("{nope").find("cfg.json: not valid JSON"), std::string::npos);
  // transformers v5's rope block: the default RoPE is read, scaling is refused.
  EXPECT_EQ(ModelConfig::from_hf_json(R"({"model_type":"llama","dtype":"bfloat16",)"
                                      R"("rope_parameters":{"rope_type":"default",)"
                                      R"("rope_theta":500000.0}})",
                                      "cfg.json")
                .rope_theta,
            500000.0);
  EXPECT_NE(error_of(R"({"model_type":"llama","rope_parameters":{"rope_type":"yarn",)"
                     R"("factor":4.0}})")
                .find("cfg.json: rope_parameters: field 'rope_type' = \"yarn\" is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"llama","rope_theta":10000.0,)"
                     R"("rope_parameters":{"rope_type":"default","rope_theta":500000.0}})")
                .find("disagree"),
            std::string::npos);
  // Known HF fields that do not change the math are accepted.
  EXPECT_EQ(error_of(R"({"model_type":"gpt2","attn_pdrop":0.1,"architectures":["x"],)"
                     R"("torch_dtype":"float32","n_inner":null})"),
            "");
}

}  // namespace
}  // namespace braid::nn
