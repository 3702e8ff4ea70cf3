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
  EXPECT_EQ(std::filesystem::file_size(dir.file("a.bin")), 64u + 2000u);

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
  EXPECT_TRUE(contains(msg, "token count 5 at offset 16") && contains(msg, "holds 8")) << msg;

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

}  // namespace
}  // namespace braid::data
