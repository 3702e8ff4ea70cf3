#include "braid/data/input_file.h"

#include <gtest/gtest.h>

#include "braid/data/compress_test_util.h"
#include "braid/data/test_util.h"

namespace braid::data {
namespace {

using testutil::error_of;
using testutil::TempDir;
using testutil::write;

// Everything InputFile gives, read in blocks of `block` bytes.
std::string read_all(const std::string& path, size_t block = 7) {
  InputFile f(path);
  std::string out, buf(block, '\0');
  for (size_t got; (got = f.read(buf.data(), buf.size())) > 0;) out.append(buf.data(), got);
  return out;
}

// Text larger than one 1 MiB input block once compressed, so streams cross block boundaries.
std::string big_text() {
  std::string text;
  uint32_t x = 12345;
  while (text.size() < (size_t{3} << 20)) {
    x = x * 1664525u + 1013904223u;
    text += "word" + std::to_string(x >> 8) + ((x & 15) == 0 ? "\n" : " ");
  }
  return text;
}

TEST(InputFile, CompressionIsChosenByName) {
  EXPECT_EQ(compression_of("a/b.jsonl.gz"), Compression::gzip);
  EXPECT_EQ(compression_of("b.txt.zst"), Compression::zstd);
  EXPECT_EQ(compression_of("b.gzip"), Compression::none);
  EXPECT_EQ(strip_compression("a/b.jsonl.gz"), "a/b.jsonl");
  EXPECT_EQ(strip_compression("b.txt.zst"), "b.txt");
  EXPECT_EQ(strip_compression("b.txt"), "b.txt");
}

TEST(InputFile, ReadsPlainGzipAndZstdAlike) {
  TempDir dir;
  const std::string text = big_text();
  write(dir.file("a.txt"), text);
  testutil::write_gz(dir.file("a.txt.gz"), text);
  testutil::write_zst(dir.file("a.txt.zst"), text);
  for (const char* name : {"a.txt", "a.txt.gz", "a.txt.zst"}) {
    EXPECT_EQ(read_all(dir.file(name), 100000), text) << name;
  }
  EXPECT_EQ(read_all(dir.file("a.txt.gz"), 3), text);

  InputFile f(dir.file("a.txt.zst"));
  std::string buf(1 << 16, '\0');
  while (f.read(buf.data(), buf.size()) > 0) {
  }
  EXPECT_EQ(f.file_bytes_read(), static_cast<int64_t>(testutil::zstd_bytes(text).size()));
}

TEST(InputFile, ConcatenatedMembersAndFramesAreOneStream) {
  TempDir dir;
  write(dir.file("c.gz"), testutil::gzip_bytes("first ") + testutil::gzip_bytes("second"));
  write(dir.file("c.zst"), testutil::zstd_bytes("first ") + testutil::zstd_bytes("second"));
  write(dir.file("empty.gz"), testutil::gzip_bytes(""));
  EXPECT_EQ(read_all(dir.file("c.gz")), "first second");
  EXPECT_EQ(read_all(dir.file("c.zst")), "first second");
  EXPECT_EQ(read_all(dir.file("empty.gz")), "");
}

TEST(InputFile, CorruptTruncatedAndMisnamedStreamsNameTheFile) {
  TempDir dir;
  const std::string text = big_text();
  std::string gz = testutil::gzip_bytes(text);
  std::string zst = testutil::zstd_bytes(text);

  write(dir.file("short.gz"), gz.substr(0, gz.size() / 2));
  auto msg = error_of([&] { read_all(dir.file("short.gz"), 4096); });
  EXPECT_NE(msg.find("short.gz': truncated gzip data"), std::string::npos) << msg;

  write(dir.file("short.zst"), zst.substr(0, zst.size() - 10));
  msg = error_of([&] { read_all(dir.file("short.zst"), 4096); });
  EXPECT_NE(msg.find("short.zst': truncated zstd data"), std::string::npos) << msg;

  std::string flipped = gz;
  for (size_t i = 100; i < 200; ++i) flipped[i] = static_cast<char>(flipped[i] ^ 0x5a);
  write(dir.file("flipped.gz"), flipped);
  msg = error_of([&] { read_all(dir.file("flipped.gz"), 4096); });
  EXPECT_NE(msg.find("flipped.gz': corrupt gzip data near byte "), std::string::npos) << msg;

  // A byte of the trailer: the data inflates, its CRC-32 does not match.
  std::string bad_crc = testutil::gzip_bytes("hello");
  bad_crc[bad_crc.size() - 6] = static_cast<char>(bad_crc[bad_crc.size() - 6] ^ 1);
  write(dir.file("crc.gz"), bad_crc);
  msg = error_of([&] { read_all(dir.file("crc.gz")); });
  EXPECT_NE(msg.find("crc.gz': corrupt gzip data near byte "), std::string::npos) << msg;

  std::string zflipped = zst;
  for (size_t i = 100; i < 200; ++i) zflipped[i] = static_cast<char>(zflipped[i] ^ 0x5a);
  write(dir.file("flipped.zst"), zflipped);
  msg = error_of([&] { read_all(dir.file("flipped.zst"), 4096); });
  EXPECT_NE(msg.find("flipped.zst': corrupt zstd data near byte "), std::string::npos) << msg;

  write(dir.file("plain.gz"), "just text");
  msg = error_of([&] { InputFile f(dir.file("plain.gz")); });
  EXPECT_NE(msg.find("plain.gz' is named as gzip but is not gzip data: it starts with bytes 6a "
                     "75, gzip with 1f 8b"),
            std::string::npos)
      << msg;
  write(dir.file("empty.zst"), "");
  msg = error_of([&] { InputFile f(dir.file("empty.zst")); });
  EXPECT_NE(msg.find("nothing (an empty file)"), std::string::npos) << msg;
  msg = error_of([&] { InputFile f(dir.file("missing.txt")); });
  EXPECT_NE(msg.find("cannot open '" + dir.file("missing.txt") + "'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace braid::data
