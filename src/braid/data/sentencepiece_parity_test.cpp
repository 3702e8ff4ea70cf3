// SentencePieceTokenizer on LLaMA-2's real tokenizer.model (scripts/fetch-data.sh puts it in
// $BRAID_DATA_DIR/tokenizers/llama2-spm/ beside the model's tokenizer.json), id for id against
// HF:
//   - the expected ids of testdata/tokenizer_parity.json for llama2-spm: Hugging Face's own
//     implementation (@huggingface/tokenizers, tools/tokenizer_parity.mjs) on the same model's
//     tokenizer.json, i.e. LlamaTokenizerFast, which with legacy (the config's) encodes as the
//     slow LlamaTokenizer on tokenizer.model does (Note [SentencePiece and HF]); the texts
//     are the checked-in samples (multilingual, code, emoji, chat markers, ill-formed UTF-8) and
//     the 233 speeches of the demo corpus;
//   - braid's HfTokenizer on that tokenizer.json (itself parity-tested, HfParity/llama2-spm), on
//     edge cases the fixture has none of (leading and runs of spaces, a literal "▁", special
//     tokens at the ends);
//   - decode as HF's decode of the same ids, and decode(encode_ordinary(text)) == text.
// Then the documented differences: legacy false as the slow LlamaTokenizer, and sentencepiece's
// own decode.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "braid/data/sentencepiece_tokenizer.h"
#include "braid/data/test_util.h"
#include "braid/data/tokenizer.h"
#include "braid/data/tokenizer_test_util.h"

namespace braid::data {
namespace {

namespace fs = std::filesystem;
using testutil::data_dir;
using testutil::first_difference;
using testutil::hash_ids;
using testutil::parity_fixture;
using testutil::parity_text_path;
using testutil::read_bytes;

class SentencePieceParity : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = data_dir() + "/tokenizers/llama2-spm";
    if (!fs::exists(dir_ + "/tokenizer.model") || !fs::exists(dir_ + "/tokenizer.json")) {
      GTEST_SKIP() << dir_ << "/tokenizer.model or tokenizer.json not found; run "
                   << "scripts/fetch-data.sh (or set BRAID_DATA_DIR)";
    }
    sp_ = Tokenizer::from_path(dir_ + "/tokenizer.model");
    hf_ = Tokenizer::from_path(dir_ + "/tokenizer.json");
  }
  std::string dir_;
  std::unique_ptr<Tokenizer> sp_, hf_;
};

TEST_F(SentencePieceParity, EncodeDecodeMatchHf) {
  EXPECT_EQ(sp_->kind(), "sentencepiece-model");
  EXPECT_EQ(sp_->vocab_size(), 32000);
  EXPECT_EQ(sp_->bos_id(), 1);
  EXPECT_EQ(sp_->eos_id(), 2);
  EXPECT_EQ(sp_->special_token_id("</s>"), 2);
  const auto& texts = parity_fixture().at("tokenizers").at("llama2-spm").at("texts");
  int64_t compared = 0, skipped = 0, ids_total = 0, bytes = 0, mismatched = 0;
  for (auto it = texts.begin(); it != texts.end(); ++it) {
    const std::string& name = it.key();
    const auto& want = it.value();
    const std::string path = parity_text_path(name);
    if (!fs::exists(path)) {
      ++skipped;
      continue;
    }
    const std::string text = read_bytes(path);
    const std::vector<int32_t> ids = sp_->encode(text);
    ++compared;
    bytes += static_cast<int64_t>(text.size());
    ids_total += static_cast<int64_t>(ids.size());
    const bool same = static_cast<int64_t>(ids.size()) == want.at("count").get<int64_t>() &&
                      hash_ids(ids) == want.at("hash").get<std::string>();
    mismatched += same ? 0 : 1;
    EXPECT_EQ(static_cast<int64_t>(ids.size()), want.at("count").get<int64_t>()) << name;
    EXPECT_EQ(hash_ids(ids), want.at("hash").get<std::string>()) << name;
    if (!same) {
      // Where: braid's reader of the same model's tokenizer.json (HfParity checks it on these
      // texts) names the first id that differs.
      const std::vector<int32_t> via_json = hf_->encode(text);
      ADD_FAILURE() << name << ": differs from tokenizer.json at id "
                    << first_difference(ids, via_json);
    }
    if (want.contains("ids")) {
      const auto expected = want.at("ids").get<std::vector<int32_t>>();
      EXPECT_EQ(ids, expected) << name << ": first difference at id "
                               << first_difference(ids, expected);
      EXPECT_EQ(sp_->decode_text(ids), want.at("decoded").get<std::string>()) << name;
    }
    // Round trip. The corpus has no special tokens, so its encode_ordinary is encode less the
    // bos (encoding it again would double the time); the samples are encoded again.
    const std::vector<int32_t> ordinary =
        want.contains("ids") ? sp_->encode_ordinary(text)
                             : std::vector<int32_t>(ids.begin() + (ids.empty() ? 0 : 1), ids.end());
    EXPECT_TRUE(sp_->decode(ordinary) == replace_ill_formed_utf8(text))
        << name << ": decode(encode_ordinary(text)) != text";
  }
  std::printf(
      "[ parity   ] llama2 tokenizer.model: %lld texts, %.2f MB, %lld ids compared with "
      "%s on its tokenizer.json, %lld texts differ%s\n",
      static_cast<long long>(compared), bytes / 1e6, static_cast<long long>(ids_total),
      parity_fixture().at("reference").get<std::string>().c_str(),
      static_cast<long long>(mismatched),
      skipped ? (" (" + std::to_string(skipped) + " absent: no demo corpus)").c_str() : "");
}

TEST_F(SentencePieceParity, EdgeCasesMatchTokenizerJson) {
  const std::vector<std::string> texts = {
      "", " ", "   ", " leading", "  two leading", "trailing ", "a  b   c    d", "\n", "\n\nx\n",
      "tab\there", "\r\n",
      "\xE2\x96\x81literal \xE2\x96\x81\xE2\x96\x81 marks",  // "▁literal ▁▁ marks"
      "<s>", " <s> ", "<s>Hi", "Hi</s>", "Hi</s> there", "</s></s>", "<unk>x<unk>", "<s >< s>",
      "12345 678.9",
      "e\xCC\x81 \xC3\xA9",    // NFD and NFC é: LLaMA-2 normalises neither
      "\xC2\xA0\xE3\x80\x80",  // U+00A0, U+3000
      "\xF0\x9F\x98\x80\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9",  // emoji, ZWJ sequence
      "\xFF x \xC3 \xED\xA0\x80",  // ill-formed: lone byte, truncation, surrogate
      // A truncated sequence: one U+FFFD (maximal subpart, as Python reads it); sentencepiece
      // alone would give two ("��", 26308) where HF gives "�" (30140).
      "a\xE2\x96"
      "b",
      "\xEA\xB0\x80\xEB\x82\x98\xEB\x8B\xA4 \xE0\xA4\xB9\xE0\xA4\xBF",  // Korean, Devanagari
  };
  int64_t ids_total = 0;
  for (const std::string& text : texts) {
    const auto ids = sp_->encode(text);
    const auto want = hf_->encode(text);
    ids_total += static_cast<int64_t>(ids.size());
    EXPECT_EQ(ids, want) << "'" << text << "': first difference at id "
                         << first_difference(ids, want);
    EXPECT_EQ(sp_->encode_ordinary(text), hf_->encode_ordinary(text)) << "'" << text << "'";
    EXPECT_EQ(sp_->decode(ids), hf_->decode(want)) << "'" << text << "'";
  }
  std::printf("[ parity   ] llama2 tokenizer.model: %zu edge cases, %lld ids, as tokenizer.json\n",
              texts.size(), static_cast<long long>(ids_total));
}

TEST_F(SentencePieceParity, FactoryPrefersTokenizerJson) {
  // Both files in one directory: tokenizer.json, as transformers' AutoTokenizer; the file
  // itself picks the other.
  EXPECT_EQ(Tokenizer::from_path(dir_)->kind(), "hf-tokenizer-json");
  testutil::TempDir only;
  fs::copy_file(dir_ + "/tokenizer.model", only.file("tokenizer.model"));
  fs::copy_file(dir_ + "/tokenizer_config.json", only.file("tokenizer_config.json"));
  const auto tok = Tokenizer::from_path(only.str());
  EXPECT_EQ(tok->kind(), "sentencepiece-model");
  EXPECT_EQ(tok->encode("Hello world"), hf_->encode("Hello world"));
}

// Note [SentencePiece and HF]: legacy false (TinyLlama's config) is the slow LlamaTokenizer's:
// one "▁" before the text only, a space after a special token kept as the next word's "▁".
TEST_F(SentencePieceParity, LegacyFalseAsSlowLlamaTokenizer) {
  testutil::TempDir d;
  fs::copy_file(dir_ + "/tokenizer.model", d.file("tokenizer.model"));
  testutil::write(d.file("tokenizer_config.json"),
                  R"({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                      "legacy": false, "add_bos_token": true, "add_eos_token": false,
                      "tokenizer_class": "LlamaTokenizer"})");
  const auto tok = Tokenizer::from_path(d.str());
  // LLaMA-2's pieces: 15043 "▁Hello", 727 "▁there", 18567 "Hi", 6324 "▁Hi", 12711 "there",
  // 1 <s>, 2 </s>.
  ASSERT_EQ(hf_->encode_ordinary("Hello"), (std::vector<int32_t>{15043}));
  // No special token in the text: as legacy.
  EXPECT_EQ(tok->encode("Hello there"), sp_->encode("Hello there"));
  // After </s>: " there" is "▁there" (legacy: the stretch gets a dummy prefix too, "▁▁there").
  EXPECT_EQ(tok->encode("Hi</s> there"), (std::vector<int32_t>{1, 6324, 2, 727}));
  EXPECT_EQ(sp_->encode("Hi</s> there"), hf_->encode("Hi</s> there"));
  EXPECT_NE(sp_->encode("Hi</s> there"), tok->encode("Hi</s> there"));
  // Right after a special token, no "▁" at all; before a leading one, the lone "▁" dropped.
  EXPECT_EQ(tok->encode("<s>Hi"), (std::vector<int32_t>{1, 1, 18567}));
  EXPECT_EQ(sp_->encode("<s>Hi"), (std::vector<int32_t>{1, 1, 6324}));
  EXPECT_EQ(tok->encode("Hi</s>there"), (std::vector<int32_t>{1, 6324, 2, 12711}));
  // A literal "▁" in the text is read as a space.
  EXPECT_EQ(tok->encode("\xE2\x96\x81Hello"), tok->encode(" Hello"));
  EXPECT_EQ(tok->decode(tok->encode_ordinary(" a  b")), " a  b");
}

// Note [SentencePiece and HF]: decode is LlamaTokenizerFast's (special tokens spelt out, one
// leading space dropped), not sentencepiece's DecodeIds, which drops <s>/</s> and spells <unk>
// " ⁇ ".
TEST_F(SentencePieceParity, DecodeSpellsSpecialTokens) {
  EXPECT_EQ(sp_->decode({1, 15043, 2}), "<s> Hello</s>");
  EXPECT_EQ(sp_->decode({0}), "<unk>");
  EXPECT_EQ(sp_->decode({15043, 29871}), "Hello ");
  // <0xE2> <0x96>: a UTF-8 sequence cut short, one U+FFFD per byte (HF's ByteFallback).
  EXPECT_EQ(sp_->decode({3 + 0xE2, 3 + 0x96, 15043}), "\xEF\xBF\xBD\xEF\xBF\xBD Hello");
  EXPECT_EQ(sp_->decode({3 + 0xE2, 3 + 0x96, 3 + 0x81}), "\xE2\x96\x81");
  EXPECT_EQ(sp_->decode({1, 15043, 2}), hf_->decode({1, 15043, 2}));
}

}  // namespace
}  // namespace braid::data
