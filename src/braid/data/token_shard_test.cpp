#include "braid/data/token_shard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <numeric>

#include "braid/data/test_util.h"

namespace braid::data {
namespace {

using testutil::error_of;
using testutil::TempDir;

void patch(const std::string& path, size_t offset, const void* bytes, size_t n) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(n));
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(TokenShard, RoundTripsU16AndI32) {
  TempDir dir;
  std::vector<int32_t> ids(1000);
  std::iota(ids.begin(), ids.end(), 0);
  ids[7] = 50256;
  write_token_shard(dir.file("a.bin"), ids, 50257);
  TokenShard a(dir.file("a.bin"), /*verify_checksum=*/true);
  EXPECT_EQ(a.dtype(), TokenDType::u16);
  EXPECT_EQ(a.size(), 1000);
  EXPECT_EQ(a.vocab_size(), 50257);
  std::vector<int32_t> back(1000);
  a.read(0, 1000, back.data());
  EXPECT_EQ(back, ids);
  // Header, payload, and the chunk table: one checksum for the one chunk.
  EXPECT_EQ(std::filesystem::file_size(dir.file("a.bin")), 64u + 2000u + 8u);

  ids[3] = 100000;
  write_token_shard(dir.file("b.bin"), ids, 128256);
  TokenShard b(dir.file("b.bin"), true);
  EXPECT_EQ(b.dtype(), TokenDType::i32);
  EXPECT_EQ(b.at(3), 100000);
  EXPECT_EQ(b.at(999), 999);
}

TEST(TokenShard, EmptyShardIsValid) {
  TempDir dir;
  write_token_shard(dir.file("e.bin"), {}, 10);
  TokenShard e(dir.file("e.bin"), true);
  EXPECT_EQ(e.size(), 0);
}

TEST(TokenShard, WriterRejectsOutOfRangeIds) {
  TempDir dir;
  std::vector<int32_t> ids{1, 2, 10};
  auto msg = error_of([&] { write_token_shard(dir.file("x.bin"), ids, 10); });
  EXPECT_TRUE(contains(msg, "token 2 is 10")) << msg;
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.bin")));
}

TEST(TokenShard, BadHeadersNameFileFieldAndOffset) {
  TempDir dir;
  std::vector<int32_t> ids{1, 2, 3, 4};
  const std::string p = dir.file("s.bin");
  auto fresh = [&] { write_token_shard(p, ids, 100); };

  fresh();
  patch(p, 0, "NOTTOKEN", 8);
  auto msg = error_of([&] { TokenShard s(p); });
  EXPECT_TRUE(contains(msg, p) && contains(msg, "bad magic at offset 0")) << msg;

  fresh();
  uint32_t v = 7;
  patch(p, 8, &v, 4);
  msg = error_of([&] { TokenShard s(p); });
  EXPECT_TRUE(contains(msg, "version 7 at offset 8")) << msg;

  fresh();
  v = 9;
  patch(p, 12, &v, 4);
  msg = error_of([&] { TokenShard s(p); });
  EXPECT_TRUE(contains(msg, "dtype 9 at offset 12")) << msg;

  fresh();
  uint64_t n = 5;
  patch(p, 16, &n, 8);
  msg = error_of([&] { TokenShard s(p); });
  EXPECT_TRUE(contains(msg,
                       "token count 5 at offset 16 needs 5 x 2 payload bytes and a chunk "
                       "table of 8 bytes, the file holds 16 after the header"))
      << msg;

  fresh();
  ASSERT_EQ(::truncate(p.c_str(), 70), 0);
  msg = error_of([&] { TokenShard s(p); });
  EXPECT_TRUE(contains(msg, "truncated")) << msg;

  ASSERT_EQ(::truncate(p.c_str(), 10), 0);
  msg = error_of([&] { TokenShard s(p); });
  EXPECT_TRUE(contains(msg, "10 bytes, too small")) << msg;

  fresh();
  uint16_t t = 99;
  patch(p, 64, &t, 2);
  EXPECT_NO_THROW(TokenShard(p, false));
  msg = error_of([&] { TokenShard s(p, true); });
  EXPECT_TRUE(contains(msg, "checksum")) << msg;

  msg = error_of([&] { TokenShard s(dir.file("missing.bin")); });
  EXPECT_TRUE(contains(msg, "missing.bin") && contains(msg, "cannot open")) << msg;
}

// 1000 u16 tokens in chunks of 256 bytes: chunks 0-6 whole, chunk 7 the last 208 bytes; the
// chunk table at file offset 64 + 2000.
std::string chunked_shard(const TempDir& dir) {
  std::vector<int32_t> ids(1000);
  std::iota(ids.begin(), ids.end(), 0);
  const std::string p = dir.file("c.bin");
  write_token_shard(p, ids, 1000, /*chunk_bytes=*/256);
  return p;
}

TEST(TokenShard, AFlippedByteIsNamedByItsChunkOnTheFirstReadOfIt) {
  TempDir dir;
  const std::string p = chunked_shard(dir);
  const unsigned char flip = 0xff;
  patch(p, 64 + 600, &flip, 1);  // token 300's low byte, in chunk 2: payload bytes [512, 768)
  TokenShard s(p);               // opening reads the header and the table only
  EXPECT_EQ(s.version(), 2u);
  EXPECT_EQ(s.chunk_bytes(), 256u);
  std::vector<int32_t> out(1000);
  EXPECT_NO_THROW(s.read(0, 256, out.data()));  // chunks 0 and 1
  EXPECT_NO_THROW(s.read(900, 100, out.data()));
  EXPECT_EQ(out[99], 999);
  const std::string want = "token shard '" + p +
                           "': corrupt: chunk 2 (file bytes [576, 832)) does not match its "
                           "checksum at offset 2080";
  auto msg = error_of([&] { s.read(290, 20, out.data()); });
  EXPECT_EQ(msg, want);
  // A window ending in the bad chunk, and one starting in it: the same error.
  EXPECT_EQ(error_of([&] { s.read(200, 57, out.data()); }), want);
  EXPECT_EQ(error_of([&] { s.at(383); }), want);
  // The whole-payload checksum agrees that the file is corrupt.
  EXPECT_FALSE(s.verify_checksum());
}

TEST(TokenShard, AChunkIsHashedOnceTheFirstTimeItIsRead) {
  TempDir dir;
  const std::string p = chunked_shard(dir);
  TokenShard s(p);
  std::vector<int32_t> out(10);
  s.read(0, 10, out.data());  // verifies chunk 0
  // The mapping is shared with the file: a byte changed after chunk 0 was verified is read as
  // it is, without hashing the chunk again; chunk 1 is hashed on its first read, and fails.
  const uint16_t changed = 7;
  patch(p, 64 + 2 * 5, &changed, 2);
  patch(p, 64 + 2 * 130, &changed, 2);
  s.read(0, 10, out.data());
  EXPECT_EQ(out[5], 7);
  auto msg = error_of([&] { s.read(130, 1, out.data()); });
  EXPECT_TRUE(contains(msg, "corrupt: chunk 1 (file bytes [320, 576))")) << msg;
}

TEST(TokenShard, ACorruptChunkTableIsNamedWhenTheShardOpens) {
  TempDir dir;
  const std::string p = chunked_shard(dir);
  const uint64_t bogus = 42;
  patch(p, 2064 + 3 * 8, &bogus, 8);
  auto msg = error_of([&] { TokenShard s(p); });
  EXPECT_EQ(msg, "token shard '" + p +
                     "': the chunk table (file bytes [2064, 2128)) does not match its checksum at "
                     "offset 48: corrupt file");
}

// Version 1 shards (no chunk table; written before braid checksummed chunks) still read, and are
// verified whole on their first read.
TEST(TokenShard, Version1ShardsReadAndVerifyWhole) {
  TempDir dir;
  std::vector<int32_t> ids(1000);
  std::iota(ids.begin(), ids.end(), 0);
  const std::string p = dir.file("v1.bin");
  write_token_shard(p, ids, 1000);
  // As the version 1 writer left it: version 1, no chunk fields, no table.
  const uint32_t v1 = 1;
  const unsigned char zeros[24] = {};
  patch(p, 8, &v1, 4);
  patch(p, 40, zeros, 24);
  ASSERT_EQ(::truncate(p.c_str(), 64 + 2000), 0);
  {
    TokenShard s(p, /*verify_checksum=*/true);
    EXPECT_EQ(s.version(), 1u);
    EXPECT_EQ(s.at(999), 999);
  }
  const unsigned char flip = 0xff;
  patch(p, 64 + 1500, &flip, 1);
  TokenShard s(p);
  auto msg = error_of([&] { s.at(3); });
  EXPECT_EQ(msg, "token shard '" + p +
                     "': corrupt: the payload (file bytes [64, 2064)) does not match the checksum "
                     "at offset 32 (a version 1 shard, checksummed whole; braid prepare-data "
                     "--force rewrites it with a checksum per chunk)");
}

}  // namespace
}  // namespace braid::data
