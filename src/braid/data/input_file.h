// InputFile: one input file's bytes, read in blocks and decompressed as its name says: `.gz`
// (gzip, through zlib; concatenated members are read one after another, as gzip -d does) or
// `.zst` (Zstandard, through libzstd; concatenated frames likewise), anything else as it is.
//
// Contract: the constructor opens the file and, for a compressed name, checks its magic bytes
// (gzip 1f 8b, zstd 28 b5 2f fd); read() fills a buffer with the next decompressed bytes and
// returns 0 only at the end of a complete stream. A corrupt or truncated stream throws an Error
// naming the file, the compressed byte offset and what the decompressor said, never short data.
// (gzip always carries a CRC-32 of the data; a zstd frame carries a checksum when it was written
// with one, as the zstd command line does by default; without one, a flipped byte that still
// decodes goes unnoticed.)
// Memory is bounded by the block size whatever the file's size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

namespace braid::data {

enum class Compression { none, gzip, zstd };

// By the name's last extension: ".gz", ".zst", else none.
Compression compression_of(std::string_view path);
// The name without its compression extension ("a.jsonl.gz" -> "a.jsonl").
std::string_view strip_compression(std::string_view path);

class InputFile {
 public:
  explicit InputFile(std::string path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // Up to n decompressed bytes into out; 0 only at the end of the file.
  size_t read(char* out, size_t n);

  const std::string& path() const { return path_; }
  Compression compression() const { return compression_; }
  // The file's size as stored (compressed bytes for .gz/.zst), when it was opened.
  int64_t size() const { return size_; }
  // Bytes of the file itself consumed so far (compressed bytes for .gz/.zst): progress.
  int64_t file_bytes_read() const { return file_bytes_read_; }

  struct Decoder;  // input_file.cpp: zlib's or libzstd's stream state

 private:
  size_t fill_input();  // the next block of the file into in_; 0 at its end

  std::string path_;
  Compression compression_;
  std::FILE* file_ = nullptr;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<char[]> in_;  // compressed bytes read but not yet decompressed
  size_t in_begin_ = 0, in_end_ = 0;
  int64_t size_ = 0;
  int64_t file_bytes_read_ = 0;
  bool stream_done_ = true;  // the last member/frame ended where the input did
};

}  // namespace braid::data
