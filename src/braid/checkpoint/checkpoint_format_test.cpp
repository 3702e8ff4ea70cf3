// The checkpoint format's pieces on their own: CRC-32C, the manifest's JSON and its errors,
// the rank-file header, step directory names and publishing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "braid/checkpoint/checkpoint_dir.h"
#include "braid/checkpoint/crc32c.h"
#include "braid/checkpoint/file_io.h"
#include "braid/checkpoint/manifest.h"
#include "braid/core/error.h"
#include "braid/core/rng.h"

namespace braid::checkpoint {
namespace {

namespace fs = std::filesystem;

uint32_t crc_bytewise(const std::vector<uint8_t>& v) {
  uint32_t c = 0;
  for (uint8_t b : v) c = crc32c(c, &b, 1);
  return c;
}

TEST(Crc32c, KnownValuesAndEverySplitAgree) {
  EXPECT_EQ(crc32c(0, "123456789", 9), 0xE3069283u);  // the standard check value
  EXPECT_EQ(crc32c(0, "", 0), 0u);
  Rng rng(3);
  for (size_t n : {size_t{1}, size_t{7}, size_t{8}, size_t{100}, size_t{3 * 8192 - 1},
                   size_t{3 * 8192}, size_t{3 * 8192 + 5}, size_t{100000}}) {
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = static_cast<uint8_t>(rng.below(256));
    const uint32_t whole = crc32c(0, v.data(), n);
    EXPECT_EQ(whole, crc_bytewise(v)) << n;  // the wide path against byte at a time
    const size_t half = n / 3;
    EXPECT_EQ(crc32c(crc32c(0, v.data(), half), v.data() + half, n - half), whole) << n;
  }
  EXPECT_EQ(format_crc32c(0xE3069283u), "crc32c:e3069283");
}

Manifest sample() {
  Manifest m;
  m.id = "0123456789abcdef";
  m.step = 7;
  m.layout = "zero3 (FULL_SHARD) over dp=2";
  m.world_size = 2;
  m.dp_size = 2;
  m.optimizer = "adamw";
  m.counters = {{"samples", 28}, {"optimizer_steps", 7}};
  m.config = "training:\n  max_steps: 9\n";
  m.files = {{"rank-00000.bin", 0, kHeaderBytes + 32, 0xdeadbeef},
             {"rank-00001.bin", 1, kHeaderBytes + 32, 0x01020304}};
  m.tensors = {{"param",
                "w",
                DType::f32,
                Shape{2, 3},
                {{0, 0, 3, kHeaderBytes, {}}, {1, 3, 3, kHeaderBytes, {}}}},
               {"exp_avg",
                "w",
                DType::f32,
                Shape{2, 3},
                {{0, 0, 3, kHeaderBytes + 12, {}}, {1, 3, 3, kHeaderBytes + 12, {}}}},
               // A tensor-parallel tensor: each rank's half of the rows (Note [Placements]).
               {"param",
                "v",
                DType::f32,
                Shape{2, 2},
                {{0, 0, 2, kHeaderBytes + 24, {.dim = 0, .parts = 2, .part = 0}},
                 {1, 0, 2, kHeaderBytes + 24, {.dim = 0, .parts = 2, .part = 1}}}}};
  return m;
}

TEST(Manifest, RoundTripsThroughJson) {
  const Manifest m = sample();
  const Manifest back = manifest_from_json(to_json(m), "test");
  EXPECT_EQ(to_json(back), to_json(m));
  ASSERT_NE(back.find("exp_avg", "w"), nullptr);
  EXPECT_EQ(back.find("exp_avg", "w")->pieces[1].offset, 3);
  EXPECT_EQ(back.find("exp_avg", "v"), nullptr);
  EXPECT_EQ(back.counter("samples"), 28);
  EXPECT_THROW(back.counter("nope"), Error);
  ASSERT_NE(back.find("param", "v"), nullptr);
  EXPECT_TRUE(back.find("param", "v")->pieces[1].tp.same_cut({.dim = 0, .parts = 2, .part = 1}));
  EXPECT_FALSE(back.find("param", "w")->pieces[0].tp.is_split());
}

// A version 1 manifest (before placements) reads as whole-tensor pieces.
TEST(Manifest, ReadsVersionOne) {
  Manifest m = sample();
  m.tensors.pop_back();
  std::string v1 = to_json(m);
  v1.replace(v1.find("\"version\": 2"), 12, "\"version\": 1");
  const Manifest back = manifest_from_json(v1, "v1.json");
  EXPECT_EQ(back.find("param", "w")->pieces.size(), 2u);
  EXPECT_FALSE(back.find("param", "w")->pieces[1].tp.is_split());
}

std::string error_of(const std::string& text) {
  try {
    manifest_from_json(text, "m.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Manifest, BadManifestsNameTheFileAndTheProblem) {
  std::string good = to_json(sample());
  EXPECT_NE(error_of("{").find("m.json: not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("{}").find("not a braid checkpoint manifest"), std::string::npos);
  std::string v9 = good;
  v9.replace(v9.find("\"version\": 2"), 12, "\"version\": 9");
  EXPECT_NE(error_of(v9).find("manifest version 9"), std::string::npos);
  std::string past = good;
  past.replace(past.find("4108"), 4, "9108");  // a piece's byte offset past the file's end
  EXPECT_NE(error_of(past).find("past the end of rank-0000"), std::string::npos) << error_of(past);
  std::string escape = good;
  escape.replace(escape.find("rank-00001.bin"), 14, "../../etc/x");
  EXPECT_NE(error_of(escape).find("not a plain name"), std::string::npos);
  // A placement that does not cut the tensor's shape (3 parts of 2 rows).
  std::string cut = good;
  cut.replace(cut.find("\"parts\": 2"), 10, "\"parts\": 3");
  EXPECT_NE(error_of(cut).find("has placement shard(dim=0, part 0 of 3), which does not cut its "
                               "shape [2, 2]"),
            std::string::npos)
      << error_of(cut);
}

TEST(FileHeader, EncodesToOneBlockAndRejectsOtherBytes) {
  const std::string h = encode_header({"00ff00ff00ff00ff", 3, 4, 12});
  EXPECT_EQ(h.size(), static_cast<size_t>(kHeaderBytes));
  const FileHeader back = decode_header(h, "f");
  EXPECT_EQ(back.id, "00ff00ff00ff00ff");
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.world_size, 4);
  EXPECT_EQ(back.step, 12);
  std::string other(static_cast<size_t>(kHeaderBytes), 'x');
  EXPECT_THROW(decode_header(other, "f"), Error);
}

TEST(CheckpointDir, NamesListingAndPruning) {
  EXPECT_EQ(step_dir_name(100), "step-00000100");
  EXPECT_EQ(step_of("step-00000100"), 100);
  EXPECT_EQ(step_of("step-"), -1);
  EXPECT_EQ(step_of("step-12x"), -1);
  EXPECT_EQ(step_of(".tmp-step-00000100"), -1);
  const fs::path root = fs::temp_directory_path() / ("braid_ckdir_" + std::to_string(::getpid()));
  fs::remove_all(root);
  for (int s : {2, 4, 6}) {
    fs::create_directories(root / step_dir_name(s));
    std::ofstream(root / step_dir_name(s) / kManifestName) << "{}";
  }
  fs::create_directories(root / step_dir_name(8));  // no manifest: not a checkpoint
  fs::create_directories(root / temp_dir_name(10));
  auto list = checkpoints_newest_first(root);
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].filename(), step_dir_name(6));
  publish(root, step_dir_name(4), /*keep_last=*/1);
  list = checkpoints_newest_first(root);
  ASSERT_EQ(list.size(), 2u);  // step 2 pruned; 6 is newer than what was published: kept
  EXPECT_EQ(list[0].filename(), step_dir_name(4));  // `latest` first
  EXPECT_EQ(list[1].filename(), step_dir_name(6));
  EXPECT_FALSE(fs::exists(root / temp_dir_name(10)));
  EXPECT_EQ(read_small_file(root / kLatestName), step_dir_name(4) + "\n");
  fs::remove_all(root);
}

}  // namespace
}  // namespace braid::checkpoint
