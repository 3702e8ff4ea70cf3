#include "braid/data/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "braid/core/error.h"
#include "braid/data/byte_unicode.h"

namespace braid::data {
namespace {

// BRAID_GPT2_DIR, else $BRAID_DATA_DIR/gpt2 (the Makefile sets it), else <repo>/data/gpt2.
std::string gpt2_dir() {
  if (const char* v = std::getenv("BRAID_GPT2_DIR"); v != nullptr && *v != '\0') return v;
  if (const char* v = std::getenv("BRAID_DATA_DIR"); v != nullptr && *v != '\0') {
    return std::string(v) + "/gpt2";
  }
  return BRAID_DEFAULT_GPT2_DIR;
}

// A vocabulary of the 256 bytes (ids 0..255, OpenAI's spelling) plus the given merges, whose
// results get ids 256, 257, ... in order, then <|endoftext|>.
BpeTokenizer mini_tokenizer(const std::vector<std::pair<std::string, std::string>>& raw_merges) {
  std::unordered_map<std::string, int32_t> vocab;
  for (int b = 0; b < 256; ++b) vocab[byte_to_unicode(static_cast<unsigned char>(b))] = b;
  std::vector<std::pair<std::string, std::string>> merges;
  for (const auto& [a, b] : raw_merges) {
    merges.emplace_back(bytes_to_unicode_string(a), bytes_to_unicode_string(b));
    vocab.emplace(bytes_to_unicode_string(a + b), static_cast<int32_t>(vocab.size()));
  }
  vocab.emplace("<|endoftext|>", static_cast<int32_t>(vocab.size()));
  return BpeTokenizer::from_vocab(vocab, merges);
}

TEST(ByteUnicode, RoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(unicode_string_to_bytes(bytes_to_unicode_string(all)), all);
  EXPECT_EQ(bytes_to_unicode_string(" "), "Ġ");
  EXPECT_EQ(bytes_to_unicode_string("\n"), "Ċ");
  EXPECT_EQ(bytes_to_unicode_string("A"), "A");
  EXPECT_THROW(unicode_string_to_bytes("日"), Error);
}

TEST(BpeTokenizerMini, AppliesMergesByRank) {
  // " l" then "lo", "low" and " low": rank decides, not length.
  auto tok = mini_tokenizer({{"l", "o"}, {"lo", "w"}, {" ", "low"}, {"e", "r"}, {"low", "er"}});
  const int32_t lo = 256, low = 257, sp_low = 258, er = 259, lower = 260;
  EXPECT_EQ(tok.encode("low"), (std::vector<int32_t>{low}));
  EXPECT_EQ(tok.encode(" low"), (std::vector<int32_t>{sp_low}));
  EXPECT_EQ(tok.encode("lower"), (std::vector<int32_t>{lower}));
  EXPECT_EQ(tok.encode("lo lo"), (std::vector<int32_t>{lo, ' ', lo}));
  EXPECT_EQ(tok.encode("owl"), (std::vector<int32_t>{'o', 'w', 'l'}));
  EXPECT_EQ(tok.encode("er"), (std::vector<int32_t>{er}));
  EXPECT_EQ(tok.vocab_size(), 262);
  EXPECT_EQ(tok.eot_id(), 261);
  EXPECT_EQ(tok.decode(tok.encode(" lower owl")), " lower owl");
}

TEST(BpeTokenizerMini, OverlappingPairsMergeLeftToRight) {
  auto tok = mini_tokenizer({{"a", "a"}});
  EXPECT_EQ(tok.encode("aaa"), (std::vector<int32_t>{256, 'a'}));
  EXPECT_EQ(tok.encode("aaaa"), (std::vector<int32_t>{256, 256}));
}

TEST(BpeTokenizerMini, PretokenizesLikeGpt2) {
  Pretokenizer pre;
  EXPECT_EQ(pre.split("I'm here  now\n\n 42x"),
            (std::vector<std::string>{"I", "'m", " here", " ", " now", "\n\n", " 42", "x"}));
  EXPECT_EQ(pre.split("a   "), (std::vector<std::string>{"a", "   "}));
  EXPECT_TRUE(pre.split("").empty());
}

TEST(BpeTokenizerMini, InvalidUtf8NamesTheOffset) {
  auto tok = mini_tokenizer({});
  try {
    tok.encode(std::string("ok \xff bad"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("byte offset 3"), std::string::npos) << e.what();
  }
}

// As Python's bytes.decode("utf-8", errors="replace"), which HF's decode uses: one U+FFFD per
// maximal ill-formed subpart.
TEST(BpeTokenizerMini, DecodeTextReplacesIllFormedUtf8) {
  BpeTokenizer tok = mini_tokenizer({});
  auto ids = [](const std::string& bytes) {
    std::vector<int32_t> v;
    for (unsigned char c : bytes) v.push_back(c);
    return v;
  };
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(tok.decode_text(ids("caf\xC3\xA9")), "caf\xC3\xA9");        // well formed
  EXPECT_EQ(tok.decode_text(ids("ab\xE2\x82")), "ab" + fffd);           // a cut-off tail
  EXPECT_EQ(tok.decode_text(ids("\xF0\x9F\x98")), fffd);                // one per subpart
  EXPECT_EQ(tok.decode_text(ids("\xFF\xC3(")), fffd + fffd + "(");      // b'\xff\xc3('
  EXPECT_EQ(tok.decode_text(ids("\xED\xA0\x80")), fffd + fffd + fffd);  // a surrogate
  EXPECT_EQ(tok.decode_text(ids("\xE0\x80x")), fffd + fffd + "x");      // overlong
}

TEST(BpeTokenizerMini, RejectsIncompleteVocabularies) {
  std::unordered_map<std::string, int32_t> vocab{{"a", 0}};
  EXPECT_THROW(BpeTokenizer::from_vocab(vocab, {}), Error);  // bytes missing
  auto full = [] {
    std::unordered_map<std::string, int32_t> v;
    for (int b = 0; b < 256; ++b) v[byte_to_unicode(static_cast<unsigned char>(b))] = b;
    return v;
  }();
  EXPECT_THROW(BpeTokenizer::from_vocab(full, {{"a", "b"}}), Error);  // "ab" not in vocab
  EXPECT_THROW(mini_tokenizer({}).decode({999}), Error);
}

class Gpt2Tokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = gpt2_dir();
    if (!std::filesystem::exists(dir_ + "/encoder.json")) {
      GTEST_SKIP() << "GPT-2 vocabulary not found in " << dir_
                   << "; run scripts/fetch-data.sh (or set BRAID_GPT2_DIR or BRAID_DATA_DIR)";
    }
  }
  std::string dir_;
};

TEST_F(Gpt2Tokenizer, HelloWorld) {
  auto tok = BpeTokenizer::from_dir(dir_);
  EXPECT_EQ(tok.encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(tok.vocab_size(), 50257);
  EXPECT_EQ(tok.eot_id(), 50256);
}

// Ids from gpt-3-encoder@1.1.4's own JS encoder (testdata/gpt2_golden.json).
TEST_F(Gpt2Tokenizer, MatchesReferenceEncoder) {
  auto tok = BpeTokenizer::from_dir(dir_);
  std::ifstream in(std::string(BRAID_DATA_TESTDATA_DIR) + "/gpt2_golden.json");
  ASSERT_TRUE(in.good());
  auto golden = nlohmann::json::parse(in);
  ASSERT_GE(golden.size(), 10u);
  for (const auto& c : golden) {
    const std::string text = c["text"];
    const auto want = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode_ordinary(text), want) << "text: " << text;
    EXPECT_EQ(tok.decode(want), text);
  }
}

// As HF's GPT2Tokenizer: the literal end-of-text marker is token 50256, and the text around it
// is encoded as ordinary text (HF splits the text on its added tokens first).
TEST_F(Gpt2Tokenizer, EndOfTextIsTheSpecialToken) {
  auto tok = BpeTokenizer::from_dir(dir_);
  EXPECT_EQ(tok.encode("<|endoftext|>"), (std::vector<int32_t>{50256}));
  EXPECT_EQ(tok.encode("Hi<|endoftext|> there"), (std::vector<int32_t>{17250, 50256, 612}));
  EXPECT_EQ(tok.encode("<|endoftext|><|endoftext|>"), (std::vector<int32_t>{50256, 50256}));
  EXPECT_EQ(tok.encode_ordinary("<|endoftext|>").size(), 7u);  // plain characters
  EXPECT_EQ(tok.decode(tok.encode("Hi<|endoftext|> there")), "Hi<|endoftext|> there");
}

TEST_F(Gpt2Tokenizer, CopiesEncodeOnTwoThreads) {
  auto tok = BpeTokenizer::from_dir(dir_);
  const std::string text = "The quick brown fox jumps over the lazy dog. ";
  auto want = tok.encode(text);
  std::vector<std::vector<int32_t>> got(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t, copy = tok]() mutable {
      for (int i = 0; i < 50; ++i) got[t] = copy.encode(text);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(got[0], want);
  EXPECT_EQ(got[1], want);
}

}  // namespace
}  // namespace braid::data
