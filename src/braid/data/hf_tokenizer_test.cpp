// HfTokenizer on small hand-written tokenizer.json files: SentencePiece-style BPE (metaspace,
// byte fallback, bos), added tokens, Tokenizer::from_path's choice, and the errors for files it
// cannot read. Parity with HF on real files is hf_tokenizer_parity_test.cpp.
#include "braid/data/hf_tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "braid/data/prepare_data.h"
#include "braid/data/test_util.h"

namespace braid::data {
namespace {

using testutil::error_of;
using testutil::llama_like;
using testutil::TempDir;
using testutil::write;

HfTokenizer load(const nlohmann::json& j, const std::string& config = "") {
  return HfTokenizer::from_json(j.dump(), config, "test tokenizer.json");
}

TEST(HfTokenizerMini, SentencePieceStyleBpe) {
  HfTokenizer tok = load(llama_like());
  EXPECT_EQ(tok.vocab_size(), 265);
  // "ab ab" -> "▁ab▁ab": ▁+a first (rank 0), then ▁a+b (rank 2).
  EXPECT_EQ(tok.encode("ab ab"), (std::vector<int32_t>{1, 264, 264}));
  EXPECT_EQ(tok.encode_ordinary("ab ab"), (std::vector<int32_t>{264, 264}));
  // No token for "é" or "c": their UTF-8 bytes as <0xNN>.
  EXPECT_EQ(tok.encode_ordinary("\xC3\xA9"
                                "c"),
            (std::vector<int32_t>{259, 3 + 0xC3, 3 + 0xA9, 3 + 'c'}));
  EXPECT_EQ(tok.decode({264, 3 + 0xC3, 3 + 0xA9, 259, 260}), "ab\xC3\xA9 a");
  // The special token is matched in the text; the text after it is prepended "▁" again (HF's
  // legacy LLaMA behaviour).
  EXPECT_EQ(tok.encode("a</s>b"), (std::vector<int32_t>{1, 262, 2, 259, 261}));
  EXPECT_EQ(tok.bos_id(), 1);  // no tokenizer_config.json: bos from the template...
  EXPECT_EQ(tok.eos_id(), 2);  // ...and </s> as eos
}

TEST(HfTokenizerMini, ConfigAddBosAddEos) {
  const std::string config = R"({"bos_token": "<s>", "eos_token": {"content": "</s>"},
                                 "add_bos_token": false, "add_eos_token": true})";
  HfTokenizer tok = load(llama_like(), config);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.encode("a"), (std::vector<int32_t>{262, 2}));
}

TEST(HfTokenizerMini, AddedTokenStrips) {
  nlohmann::json j = llama_like();
  j["added_tokens"].push_back(
      {{"id", 265}, {"content", "<x>"}, {"special", false}, {"lstrip", true}, {"rstrip", true}});
  HfTokenizer tok = load(j);
  // The spaces on both sides of <x> go with it.
  EXPECT_EQ(tok.encode_ordinary("a <x> b").size(), 7u);  // no added tokens in encode_ordinary
  EXPECT_EQ(tok.encode("a  <x>  b"), (std::vector<int32_t>{1, 262, 265, 259, 261}));
  EXPECT_EQ(tok.special_token_id("<x>"), 265);
  EXPECT_EQ(tok.vocab_size(), 266);
}

TEST(HfTokenizerMini, IllFormedUtf8IsReplaced) {
  HfTokenizer tok = load(llama_like());
  // 0xFF -> U+FFFD (EF BF BD), as Python's errors="replace" reads it.
  EXPECT_EQ(tok.encode_ordinary("\xFF"), (std::vector<int32_t>{259, 3 + 0xEF, 3 + 0xBF, 3 + 0xBD}));
}

TEST(HfTokenizerErrors, UnsupportedModelTypeIsNamed) {
  const std::string msg = error_of([] {
    HfTokenizer::from_json(R"({"model": {"type": "Unigram", "vocab": []}})", "",
                           "x/tokenizer.json");
  });
  EXPECT_NE(msg.find("x/tokenizer.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model type 'Unigram' is not supported"), std::string::npos) << msg;
}

TEST(HfTokenizerErrors, UnsupportedComponentsAreNamed) {
  nlohmann::json j = llama_like();
  j["normalizer"] = {{"type", "NFKC"}};
  EXPECT_NE(error_of([&] { load(j); }).find("normalizer type 'NFKC' is not supported"),
            std::string::npos);
  j = llama_like();
  j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  EXPECT_NE(error_of([&] { load(j); }).find("pre-tokenizer type 'BertPreTokenizer'"),
            std::string::npos);
  j = llama_like();
  j["model"]["merges"].push_back("a c");
  const std::string msg = error_of([&] { load(j); });
  EXPECT_NE(msg.find("merge 3 ('a c'): 'c' is not in the vocabulary"), std::string::npos) << msg;
}

TEST(HfTokenizerErrors, MalformedJsonIsNamed) {
  TempDir dir;
  write(dir.file("tokenizer.json"), "{\"model\": {\"type\": \"BPE\", ");
  const std::string msg = error_of([&] { Tokenizer::from_path(dir.str()); });
  EXPECT_NE(msg.find(dir.file("tokenizer.json") + "' is not valid JSON"), std::string::npos) << msg;
}

TEST(HfTokenizerErrors, PrepareDataWritesNothing) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("tok"));
  write(dir.file("tok/tokenizer.json"), R"({"model": {"type": "WordPiece", "vocab": {}}})");
  write(dir.file("doc.txt"), "hello");
  PrepareDataOptions o;
  o.inputs = {dir.file("doc.txt")};
  o.tokenizer_dir = dir.file("tok");
  o.out_dir = dir.file("out");
  o.val_fraction = 0;
  const std::string msg = error_of([&] { prepare_data(o); });
  EXPECT_NE(msg.find("model type 'WordPiece' is not supported"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(dir.file("out")));
}

TEST(TokenizerFromPath, ChoosesByWhatIsThere) {
  TempDir dir;
  write(dir.file("tokenizer.json"), llama_like().dump());
  EXPECT_EQ(Tokenizer::from_path(dir.str())->kind(), "hf-tokenizer-json");
  EXPECT_EQ(Tokenizer::from_path(dir.file("tokenizer.json"))->vocab_size(), 265);

  // Only tokenizer.model: the SentencePiece reader (sentencepiece_tokenizer_test.cpp).
  TempDir sp;
  write(sp.file("tokenizer.model"), "not a model");
  EXPECT_NE(error_of([&] { Tokenizer::from_path(sp.str()); }).find("is not a SentencePiece model"),
            std::string::npos);
  TempDir empty;
  const std::string msg = error_of([&] { Tokenizer::from_path(empty.str()); });
  EXPECT_NE(msg.find("neither tokenizer.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tokenizer.model"), std::string::npos) << msg;
}

}  // namespace
}  // namespace braid::data
