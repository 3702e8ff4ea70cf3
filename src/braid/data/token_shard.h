// Token shards: one file of token ids behind a fixed 64-byte little-endian header.
//
//   offset  size  field
//        0     8  magic "BRAIDTOK"
//        8     4  version (u32, 1)
//       12     4  dtype (u32): 1 = u16 (vocabularies of at most 65536 tokens), 2 = i32
//       16     8  token count (u64)
//       24     8  vocab size (u64): every id is below it
//       32     8  checksum (u64): shard_checksum() of the payload bytes
//       40    24  reserved, zero
//       64     -  payload: token count ids of dtype
//
// TokenShardWriter writes a shard atomically (temporary file, then rename). TokenShard maps one
// read-only; opening validates the header and the size, and errors name the file, the field
// and its offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace braid::data {

enum class TokenDType : uint32_t { u16 = 1, i32 = 2 };

constexpr uint32_t kTokenShardVersion = 1;
constexpr size_t kTokenShardHeaderBytes = 64;

// u16 when every id fits (vocab_size <= 65536), else i32.
TokenDType token_dtype_for_vocab(int64_t vocab_size);
size_t token_dtype_size(TokenDType d);
const char* token_dtype_name(TokenDType d);

// FNV-1a over the bytes, 8 at a time (little-endian words), then the tail byte by byte.
uint64_t shard_checksum(const void* data, size_t nbytes);

// Writes ids (each < vocab_size, checked) to path in the dtype vocab_size implies.
void write_token_shard(const std::string& path, std::span<const int32_t> ids, int64_t vocab_size);

class TokenShard {
 public:
  // Maps path and validates its header and size; with verify_checksum also the payload checksum.
  explicit TokenShard(const std::string& path, bool verify_checksum = false);
  ~TokenShard();
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;
  TokenShard(TokenShard&& o) noexcept;
  TokenShard& operator=(TokenShard&& o) noexcept;

  const std::string& path() const { return path_; }
  int64_t size() const { return num_tokens_; }  // tokens
  int64_t vocab_size() const { return vocab_size_; }
  TokenDType dtype() const { return dtype_; }
  uint64_t checksum() const { return checksum_; }
  bool verify_checksum() const;  // recomputes over the payload

  // Copies tokens [begin, begin + count) widened to i32 into out.
  void read(int64_t begin, int64_t count, int32_t* out) const;
  int32_t at(int64_t i) const;

 private:
  void close();

  std::string path_;
  const unsigned char* map_ = nullptr;
  size_t map_bytes_ = 0;
  int64_t num_tokens_ = 0;
  int64_t vocab_size_ = 0;
  TokenDType dtype_ = TokenDType::u16;
  uint64_t checksum_ = 0;
};

}  // namespace braid::data
