// SentencePieceTokenizer without the fetched files: a small BPE model trained here by
// libsentencepiece (byte fallback, as LLaMA's), read with tokenizer_config.json's added tokens,
// add_bos_token / add_eos_token and legacy; Tokenizer::from_path's choice; the errors for a file
// that is not a model and for a tokenizer class braid does not read. Parity with HF on LLaMA-2's
// real tokenizer.model is sentencepiece_parity_test.cpp.
#include "braid/data/sentencepiece_tokenizer.h"

#include <gtest/gtest.h>
#include <sentencepiece_trainer.h>

#include <filesystem>
#include <fstream>

#include "braid/data/test_util.h"

namespace braid::data {
namespace {

using testutil::error_of;
using testutil::TempDir;
using testutil::write;

// dir/tokenizer.model: BPE over a few sentences, <unk> <s> </s> = 0 1 2, then <0x00>..<0xFF>.
void train_model(const TempDir& dir) {
  std::ofstream text(dir.file("corpus.txt"));
  for (int i = 0; i < 20; ++i) {
    text << "the quick brown fox jumps over the lazy dog\n"
         << "hello world, hello there; the world says hello back\n";
  }
  text.close();
  const auto status = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + dir.file("corpus.txt") + " --model_prefix=" + dir.file("tokenizer") +
      " --model_type=bpe --vocab_size=320 --hard_vocab_limit=false --byte_fallback=true"
      " --character_coverage=1.0 --unk_id=0 --bos_id=1 --eos_id=2 --minloglevel=2");
  ASSERT_TRUE(status.ok()) << status.ToString();
}

const std::string kConfig = R"({
  "tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
  "unk_token": "<unk>", "add_bos_token": true, "add_eos_token": true,
  "added_tokens_decoder": {
    "1": {"content": "<s>", "special": true},
    "2": {"content": "</s>", "special": true},
    "400": {"content": "<|im_start|>", "special": true, "rstrip": true}}})";

TEST(SentencePieceTokenizer, TrainedModelWithConfig) {
  TempDir dir;
  train_model(dir);
  write(dir.file("tokenizer_config.json"), kConfig);
  const auto tok = Tokenizer::from_path(dir.str());
  EXPECT_EQ(tok->kind(), "sentencepiece-model");
  EXPECT_EQ(tok->vocab_size(), 401);  // the added token's id, past the model's pieces
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->special_token_id("<|im_start|>"), 400);
  EXPECT_EQ(tok->special_token_id("hello"), -1);

  const std::vector<int32_t> hello = tok->encode_ordinary("hello world");
  ASSERT_FALSE(hello.empty());
  EXPECT_EQ(tok->encode("hello world"), [&] {
    std::vector<int32_t> ids{1};
    ids.insert(ids.end(), hello.begin(), hello.end());
    ids.push_back(2);
    return ids;
  }());
  EXPECT_EQ(tok->decode(hello), "hello world");
  // The marker is cut out of the text and takes the spaces after it (rstrip); as legacy, the
  // text after it gets the dummy prefix again.
  std::vector<int32_t> want{1};
  want.insert(want.end(), hello.begin(), hello.end());
  want.push_back(400);
  want.insert(want.end(), hello.begin(), hello.end());
  want.push_back(2);
  EXPECT_EQ(tok->encode("hello world<|im_start|>   hello world"), want);
  EXPECT_EQ(tok->decode(want), "<s> hello world<|im_start|> hello world</s>");
  EXPECT_EQ(tok->decode({400}), "<|im_start|>");
  // Characters the model has no piece for: their UTF-8 bytes (byte fallback), and back.
  const std::string text = "z\xC3\xA9\xE2\x82\xAC \xF0\x9F\x98\x80";  // zé€ 😀
  EXPECT_EQ(tok->decode(tok->encode_ordinary(text)), text);
  // Ill-formed UTF-8 is read as U+FFFD first.
  EXPECT_EQ(tok->encode_ordinary("a\xFF"), tok->encode_ordinary("a\xEF\xBF\xBD"));
  // A copy encodes the same (shared model).
  EXPECT_EQ(tok->clone()->encode("hello world"), tok->encode("hello world"));
}

TEST(SentencePieceTokenizer, NoConfigUsesTheModelsSpecialPieces) {
  TempDir dir;
  train_model(dir);
  const auto tok = Tokenizer::from_path(dir.file("tokenizer.model"));
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->special_token_id("</s>"), 2);
  // LlamaTokenizer's defaults: bos, no eos; <s> and </s> in the text are the tokens.
  const std::vector<int32_t> ids = tok->encode("hello</s>");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
}

TEST(SentencePieceTokenizer, LegacyFalseKeepsTheSpaceAfterASpecialToken) {
  TempDir dir;
  train_model(dir);
  write(dir.file("tokenizer_config.json"),
        R"({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": false, "legacy": false})");
  const auto tok = Tokenizer::from_path(dir.str());
  // "hello</s> world": the stretch after </s> is " world", encoded as "▁world" with no dummy
  // prefix, the same ids as "world" gets at the start of a text.
  const std::vector<int32_t> hello = tok->encode_ordinary("hello");
  const std::vector<int32_t> world = tok->encode_ordinary("world");
  std::vector<int32_t> want = hello;
  want.push_back(2);
  want.insert(want.end(), world.begin(), world.end());
  EXPECT_EQ(tok->encode("hello</s> world"), want);
  // A leading special token: no "▁" before it.
  EXPECT_EQ(tok->encode("</s>").size(), 1u);
}

TEST(SentencePieceTokenizerErrors, NotAModelIsNamed) {
  TempDir dir;
  write(dir.file("tokenizer.model"), "not a protobuf");
  const std::string msg = error_of([&] { Tokenizer::from_path(dir.str()); });
  EXPECT_NE(msg.find("'" + dir.file("tokenizer.model") + "' is not a SentencePiece model"),
            std::string::npos)
      << msg;
}

TEST(SentencePieceTokenizerErrors, UnsupportedTokenizerClassIsNamed) {
  TempDir dir;
  train_model(dir);
  write(dir.file("tokenizer_config.json"), R"({"tokenizer_class": "AlbertTokenizer"})");
  const std::string msg = error_of([&] { Tokenizer::from_path(dir.str()); });
  EXPECT_NE(msg.find(dir.file("tokenizer.model")), std::string::npos) << msg;
  EXPECT_NE(msg.find("tokenizer_class 'AlbertTokenizer' is not supported"), std::string::npos)
      << msg;
}

TEST(SentencePieceTokenizerErrors, ConfigTokenNotInTheModel) {
  TempDir dir;
  train_model(dir);
  write(dir.file("tokenizer_config.json"), R"({"bos_token": "<|begin_of_text|>"})");
  const std::string msg = error_of([&] { Tokenizer::from_path(dir.str()); });
  EXPECT_NE(msg.find("bos_token '<|begin_of_text|>' is not a token"), std::string::npos) << msg;
}

}  // namespace
}  // namespace braid::data
