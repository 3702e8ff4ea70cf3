#include "braid/data/prepare_data.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "braid/data/byte_unicode.h"
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

}  // namespace
}  // namespace braid::data
