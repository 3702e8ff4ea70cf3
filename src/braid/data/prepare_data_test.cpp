#include "braid/data/prepare_data.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "braid/data/byte_unicode.h"
#include "braid/data/compress_test_util.h"
#include "braid/data/data_loader.h"
#include "braid/data/test_util.h"
#include "braid/data/token_shard.h"

namespace braid::data {
namespace {

using testutil::error_of;
using testutil::TempDir;
using testutil::write;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// A tokenizer directory with the 256 byte tokens, merges "t"+"h" and "th"+"e", and <|endoftext|>.
std::string mini_tokenizer_dir(const TempDir& dir) {
  nlohmann::json enc;
  for (int b = 0; b < 256; ++b) enc[byte_to_unicode(static_cast<unsigned char>(b))] = b;
  enc["th"] = 256;
  enc["the"] = 257;
  enc["<|endoftext|>"] = 258;
  std::filesystem::create_directories(dir.file("tok"));
  write(dir.file("tok/encoder.json"), enc.dump());
  write(dir.file("tok/vocab.bpe"), "#version: 0.2\nt h\nth e\n");
  return dir.file("tok");
}

// Ten documents doc0.txt..doc9.txt, document i being "the " repeated i + 1 times.
std::string corpus_dir(const TempDir& dir) {
  std::filesystem::create_directories(dir.file("corpus"));
  for (int i = 0; i < 10; ++i) {
    std::string text;
    for (int k = 0; k <= i; ++k) text += "the ";
    write(dir.file("corpus/doc" + std::to_string(i) + ".txt"), text);
  }
  write(dir.file("corpus/ignored.json"), "{}");
  return dir.file("corpus");
}

TEST(PrepareData, ValidationDocumentsAreSpreadAndDeterministic) {
  EXPECT_EQ(validation_documents(10, 0.2), (std::vector<int64_t>{2, 7}));
  EXPECT_EQ(validation_documents(233, 0.05).size(), 12u);
  EXPECT_TRUE(validation_documents(10, 0).empty());
  EXPECT_EQ(validation_documents(10, 0.01), (std::vector<int64_t>{5}));
  EXPECT_NE(error_of([] { validation_documents(1, 0.5); }).find("no training"), std::string::npos);
}

TEST(PrepareData, WritesShardsAndMetaIdenticallyForAnyThreadCount) {
  TempDir dir;
  PrepareDataOptions o;
  o.inputs = {corpus_dir(dir)};
  o.tokenizer_dir = mini_tokenizer_dir(dir);
  o.val_fraction = 0.2;
  o.shard_tokens = 16;
  o.threads = 1;
  o.out_dir = dir.file("out1");
  auto r1 = prepare_data(o);
  o.threads = 3;
  o.out_dir = dir.file("out3");
  auto r3 = prepare_data(o);

  // "the the " splits into "the", " the", " " and " the" becomes ' ', "the" (no merge makes
  // " the"), so document i is eot plus 2 (i + 1) tokens.
  EXPECT_FALSE(r1.skipped);
  EXPECT_EQ(r1.vocab_size, 259);
  EXPECT_EQ(r1.val.documents, 2);
  EXPECT_EQ(r1.train.documents, 8);
  // Val holds documents 2 and 7.
  EXPECT_EQ(r1.val.tokens, (1 + 2 * 3) + (1 + 2 * 8));
  EXPECT_EQ(r1.train.tokens + r1.val.tokens, 10 + 2 * 55);
  EXPECT_EQ(r1.train.shards.size(), static_cast<size_t>((r1.train.tokens + 15) / 16));
  for (const auto& s : r1.train.shards) {
    EXPECT_EQ(slurp(dir.file("out1/" + s)), slurp(dir.file("out3/" + s))) << s;
  }
  TokenShard first(dir.file("out1/train_000000.bin"), true);
  EXPECT_EQ(first.size(), 16);
  EXPECT_EQ(first.at(0), 258);  // eot, then "the", " "
  EXPECT_EQ(first.at(1), 257);
  EXPECT_EQ(first.at(2), ' ');
  EXPECT_EQ(first.at(3), 258);

  auto meta = nlohmann::json::parse(slurp(r1.meta_path));
  EXPECT_EQ(meta["tokenizer"]["vocab_size"], 259);
  EXPECT_EQ(meta["tokenizer"]["eot_id"], 258);
  EXPECT_EQ(meta["dtype"], "u16");
  EXPECT_EQ(meta["val"]["tokens"], r1.val.tokens);
  EXPECT_EQ(meta["source"]["files"].size(), 10u);

  auto loader = DataLoader::from_dir(dir.file("out1"), "val", {.batch_size = 1, .seq_len = 4});
  EXPECT_EQ(loader->num_samples(), (24 - 5) / 4 + 1);
}

TEST(PrepareData, RerunSkipsRefusesChangesAndForceRebuilds) {
  TempDir dir;
  PrepareDataOptions o;
  o.inputs = {corpus_dir(dir)};
  o.tokenizer_dir = mini_tokenizer_dir(dir);
  o.out_dir = dir.file("out");
  o.val_fraction = 0.1;
  auto first = prepare_data(o);
  auto again = prepare_data(o);
  EXPECT_TRUE(again.skipped);
  EXPECT_EQ(again.train.tokens, first.train.tokens);
  EXPECT_EQ(again.train.shards, first.train.shards);

  o.val_fraction = 0.3;
  auto msg = error_of([&] { prepare_data(o); });
  EXPECT_NE(msg.find("--force"), std::string::npos) << msg;
  o.force = true;
  auto forced = prepare_data(o);
  EXPECT_FALSE(forced.skipped);
  EXPECT_EQ(forced.val.documents, 3);

  std::filesystem::remove(dir.file("out/" + forced.train.shards[0]));
  o.force = false;
  EXPECT_FALSE(prepare_data(o).skipped);  // a missing shard means rebuild
}

TEST(PrepareData, BadInputNamesTheFile) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("bad"));
  write(dir.file("bad/a.txt"), "fine text");
  write(dir.file("bad/b.txt"), "broken \xc3\x28 text");
  PrepareDataOptions o;
  o.inputs = {dir.file("bad")};
  o.tokenizer_dir = mini_tokenizer_dir(dir);
  o.out_dir = dir.file("out");
  o.val_fraction = 0;
  auto msg = error_of([&] { prepare_data(o); });
  EXPECT_NE(msg.find("b.txt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte offset 7"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(dir.file("out/meta.json")));

  o.inputs = {dir.file("nope")};
  msg = error_of([&] { prepare_data(o); });
  EXPECT_NE(msg.find("nope"), std::string::npos) << msg;
}

// Document i of the mixed corpus: "the " i + 1 times, then text in three scripts and an emoji.
std::string mixed_document(int i) {
  std::string text;
  for (int k = 0; k <= i; ++k) text += "the ";
  return text + "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xd0\xbc\xd0\xb8\xd1\x80 \xf0\x9f\x98\x80\n";
}

// JSONL lines {"id": i, "text": document i} for i in [begin, end); ascii: escape everything
// outside ASCII (\u00e9, surrogate pairs), else raw UTF-8.
std::string jsonl_lines(int begin, int end, bool ascii) {
  std::string out;
  for (int i = begin; i < end; ++i) {
    out += nlohmann::json{{"id", i}, {"text", mixed_document(i)}}.dump(-1, ' ', ascii) + "\n";
  }
  return out;
}

// Every file directly in dir, name -> bytes.
std::map<std::string, std::string> files_in(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    out[e.path().filename().string()] = e.is_regular_file() ? slurp(e.path().string()) : "(dir)";
  }
  return out;
}

TEST(PrepareData, MixedDirectoryGivesTheTokensOfThePlainFiles) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("plain"));
  for (int i = 0; i < 10; ++i) {
    write(dir.file("plain/doc" + std::to_string(i) + ".txt"), mixed_document(i));
  }
  // The same ten documents, in the same order once sorted by path, in every format.
  std::filesystem::create_directories(dir.file("mixed/d"));
  write(dir.file("mixed/a_0.txt"), mixed_document(0));
  testutil::write_gz(dir.file("mixed/a_1.txt.gz"), mixed_document(1));
  testutil::write_zst(dir.file("mixed/a_2.txt.zst"), mixed_document(2));
  write(dir.file("mixed/b.jsonl"), "\n" + jsonl_lines(3, 5, false) + "\n");
  testutil::write_gz(dir.file("mixed/c.jsonl.gz"), jsonl_lines(5, 7, true));
  testutil::write_zst(dir.file("mixed/d/e.jsonl.zst"), jsonl_lines(7, 10, false));
  write(dir.file("mixed/notes.md"), "not an input");

  EXPECT_EQ(
      list_text_files({dir.file("mixed")}),
      (std::vector<std::string>{dir.file("mixed/a_0.txt"), dir.file("mixed/a_1.txt.gz"),
                                dir.file("mixed/a_2.txt.zst"), dir.file("mixed/b.jsonl"),
                                dir.file("mixed/c.jsonl.gz"), dir.file("mixed/d/e.jsonl.zst")}));

  PrepareDataOptions o;
  o.tokenizer_dir = mini_tokenizer_dir(dir);
  o.val_fraction = 0.2;
  o.shard_tokens = 50;
  o.inputs = {dir.file("plain")};
  o.out_dir = dir.file("out_plain");
  const auto plain = prepare_data(o);
  o.inputs = {dir.file("mixed")};
  o.out_dir = dir.file("out_mixed");
  o.threads = 3;
  std::vector<PrepareProgress> seen;
  o.progress = [&](const PrepareProgress& p) { seen.push_back(p); };
  const auto mixed = prepare_data(o);

  EXPECT_EQ(mixed.train.documents, 8);
  EXPECT_EQ(mixed.val.documents, 2);
  EXPECT_EQ(mixed.train.tokens, plain.train.tokens);
  EXPECT_EQ(mixed.val.tokens, plain.val.tokens);
  EXPECT_EQ(mixed.text_bytes, plain.text_bytes);
  ASSERT_EQ(mixed.train.shards, plain.train.shards);
  for (const auto& s : plain.train.shards) {
    EXPECT_EQ(slurp(dir.file("out_plain/" + s)), slurp(dir.file("out_mixed/" + s))) << s;
  }
  for (const auto& s : plain.val.shards) {
    EXPECT_EQ(slurp(dir.file("out_plain/" + s)), slurp(dir.file("out_mixed/" + s))) << s;
  }
  ASSERT_EQ(seen.size(), 10u);
  EXPECT_EQ(seen.back().documents, 10);
  EXPECT_EQ(seen.back().documents_total, 10);
  EXPECT_EQ(seen.back().file_bytes, mixed.input_bytes);
  EXPECT_EQ(seen.back().text_bytes, mixed.text_bytes);
  EXPECT_EQ(seen.back().tokens, mixed.train.tokens + mixed.val.tokens);
  EXPECT_FALSE(std::filesystem::exists(dir.file("out_mixed/.prepare-data.tmp")));
  EXPECT_EQ(nlohmann::json::parse(slurp(mixed.meta_path))["source"]["field"], "text");
  EXPECT_FALSE(nlohmann::json::parse(slurp(plain.meta_path))["source"].contains("field"));
}

TEST(PrepareData, FieldChoosesTheJsonlField) {
  TempDir dir;
  write(dir.file("a.jsonl"),
        "{\"text\": 1, \"body\": \"the the \"}\n{\"body\": \"the \", \"text\": null}\n");
  PrepareDataOptions o;
  o.inputs = {dir.file("a.jsonl")};
  o.tokenizer_dir = mini_tokenizer_dir(dir);
  o.out_dir = dir.file("out");
  o.val_fraction = 0;
  auto msg = error_of([&] { prepare_data(o); });
  EXPECT_NE(msg.find(dir.file("a.jsonl") + ":1: field \"text\" holds a number, not a string"),
            std::string::npos)
      << msg;
  o.field = "body";
  const auto r = prepare_data(o);
  EXPECT_EQ(r.train.documents, 2);
  EXPECT_EQ(r.train.tokens, (1 + 4) + (1 + 2));  // eot the ' ' the ' ', eot the ' '
  o.field = "text";
  msg = error_of([&] { prepare_data(o); });
  EXPECT_NE(msg.find("--force"), std::string::npos) << msg;  // another field: other data
}

// testutil::llama_like(), whose post-processor begins every text with <s> (id 1): "ab" is
// <s> ▁ab (264).
std::string bos_adding_tokenizer_dir(const TempDir& dir) {
  std::filesystem::create_directories(dir.file("llama"));
  write(dir.file("llama/tokenizer.json"), testutil::llama_like().dump());
  return dir.file("llama");
}

TEST(PrepareData, ATokenizerThatAddsBosGetsItOncePerDocument) {
  TempDir dir;
  write(dir.file("docs.jsonl"), "{\"text\": \"ab\"}\n{\"text\": \"ab ab\"}\n");
  PrepareDataOptions o;
  o.inputs = {dir.file("docs.jsonl")};
  o.tokenizer_dir = bos_adding_tokenizer_dir(dir);
  o.out_dir = dir.file("out");
  o.val_fraction = 0;
  const auto r = prepare_data(o);
  EXPECT_EQ(nlohmann::json::parse(slurp(r.meta_path))["tokenizer"]["eot_id"], 1);
  TokenShard shard(dir.file("out/train_000000.bin"), true);
  std::vector<int32_t> ids(static_cast<size_t>(shard.size()));
  shard.read(0, shard.size(), ids.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 264, 1, 264, 264}));
}

TEST(PrepareData, BadJsonlLineFailsWritingNothing) {
  TempDir dir;
  std::string long_doc;
  for (int k = 0; k < 100; ++k) long_doc += "the ";
  PrepareDataOptions o;
  o.inputs = {dir.file("in")};
  o.tokenizer_dir = mini_tokenizer_dir(dir);
  o.out_dir = dir.file("out");
  o.val_fraction = 0;
  o.shard_tokens = 8;
  std::filesystem::create_directories(dir.file("in"));
  write(dir.file("in/a.txt"), long_doc);  // shards of this are written before the bad line
  write(dir.file("in/b.jsonl"), "{\"text\": \"the\"}\n\n{\"text\": \"the\",}\n");
  const auto msg = error_of([&] { prepare_data(o); });
  EXPECT_NE(msg.find(dir.file("in/b.jsonl") +
                     ":3: invalid JSON at column 16: syntax error while parsing object key"),
            std::string::npos)
      << msg;
  EXPECT_FALSE(std::filesystem::exists(dir.file("out")));
}

TEST(PrepareData, FailedRunLeavesThePreviousOutputAsItWas) {
  TempDir dir;
  PrepareDataOptions o;
  o.inputs = {corpus_dir(dir)};
  o.tokenizer_dir = mini_tokenizer_dir(dir);
  o.out_dir = dir.file("out");
  o.val_fraction = 0.2;
  o.shard_tokens = 16;
  prepare_data(o);
  const auto before = files_in(dir.file("out"));
  ASSERT_GT(before.size(), 3u);

  // A corrupt .txt.gz is found while tokenising, after some shards are written; a missing
  // JSONL field while counting is not (counting does not parse), nor is it after.
  std::string text;
  for (int k = 0; k < 2000; ++k) text += std::to_string(k * 7919 % 1000) + " the ";
  std::string gz = testutil::gzip_bytes(text);
  for (size_t i = 200; i < 220; ++i) gz[i] = static_cast<char>(gz[i] ^ 0x33);
  write(dir.file("corpus/doc95.txt.gz"), gz);
  o.force = true;
  auto msg = error_of([&] { prepare_data(o); });
  EXPECT_NE(msg.find(dir.file("corpus/doc95.txt.gz") + "': corrupt gzip data near byte"),
            std::string::npos)
      << msg;
  EXPECT_EQ(files_in(dir.file("out")), before);

  std::filesystem::remove(dir.file("corpus/doc95.txt.gz"));
  write(dir.file("corpus/more.jsonl"), "{\"text\": \"the\"}\n{\"txt\": \"the\"}\n");
  msg = error_of([&] { prepare_data(o); });
  EXPECT_NE(msg.find(dir.file("corpus/more.jsonl") + ":2: no \"text\" field"), std::string::npos)
      << msg;
  EXPECT_EQ(files_in(dir.file("out")), before);

  std::filesystem::remove(dir.file("corpus/more.jsonl"));
  write(dir.file("corpus/blank.jsonl"), "\n  \n");
  o.inputs = {dir.file("corpus/blank.jsonl")};
  msg = error_of([&] { prepare_data(o); });
  EXPECT_NE(msg.find("the inputs hold no documents"), std::string::npos) << msg;
  EXPECT_EQ(files_in(dir.file("out")), before);
}

}  // namespace
}  // namespace braid::data
