// Token shards: one file of token ids behind a fixed 64-byte little-endian header.
//
//   offset  size  field
//        0     8  magic "BRAIDTOK"
//        8     4  version (u32): 2; version 1 (no chunk table) is still read
//       12     4  dtype (u32): 1 = u16 (vocabularies of at most 65536 tokens), 2 = i32,
//                 3 = u8 (at most 256 values: the flag shards of Note [Token flags])
//       16     8  token count (u64)
//       24     8  vocab size (u64): every id is below it
//       32     8  checksum (u64): shard_checksum() of the payload bytes
//       40     8  chunk bytes (u64, version 2): the payload is also checksummed in chunks of
//                 this many bytes (the last may be shorter)
//       48     8  chunk table checksum (u64, version 2): shard_checksum() of the chunk table
//       56     8  reserved, zero
//       64     -  payload: token count ids of dtype
//  64 + payload   version 2: the chunk table, shard_checksum() of each chunk (u64 each)
//
// TokenShardWriter writes a shard atomically (temporary file, then rename). TokenShard maps one
// read-only; opening validates the header, the size and the chunk table, and errors name the
// file, the field and its offset.
//
// Note [First-touch verification]: reads verify the payload they touch the first time they
// touch it, one chunk at a time (a version 1 shard: its whole payload at once), so a flipped
// byte is an error naming the file and the chunk's byte range instead of silently wrong tokens.
// Each chunk is hashed once per TokenShard, on the thread that reads it first — the
// DataLoader's prefetch thread, not the training step — so a run's cost is one pass over the
// data it reads (FNV-1a over 8-byte words: 0.2 ms per 1 MiB chunk measured, about 5 GB/s) and a
// read of chunks already verified costs a flag test per chunk.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace braid::data {

enum class TokenDType : uint32_t { u16 = 1, i32 = 2, u8 = 3 };

constexpr uint32_t kTokenShardVersion = 2;
constexpr size_t kTokenShardHeaderBytes = 64;
constexpr size_t kTokenShardChunkBytes = size_t{1} << 20;  // what write_token_shard uses

// u16 when every id fits (vocab_size <= 65536), else i32.
TokenDType token_dtype_for_vocab(int64_t vocab_size);
size_t token_dtype_size(TokenDType d);
const char* token_dtype_name(TokenDType d);

// FNV-1a over the bytes, 8 at a time (little-endian words), then the tail byte by byte.
uint64_t shard_checksum(const void* data, size_t nbytes);

// Writes ids (each < vocab_size, checked) to path in the dtype vocab_size implies (or `dtype`,
// which must hold every id below vocab_size), as a version 2 shard with a checksum per
// chunk_bytes of payload.
void write_token_shard(const std::string& path, std::span<const int32_t> ids, int64_t vocab_size,
                       size_t chunk_bytes = kTokenShardChunkBytes,
                       std::optional<TokenDType> dtype = std::nullopt);

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
  uint32_t version() const { return version_; }
  uint64_t checksum() const { return checksum_; }
  bool verify_checksum() const;  // recomputes over the payload
  // Payload bytes per checksummed chunk: version 2's chunk bytes, the whole payload for version 1.
  size_t chunk_bytes() const { return chunk_bytes_; }

  // Copies tokens [begin, begin + count) widened to i32 into out, after verifying the chunks
  // they lie in if no read has yet (Note [First-touch verification]); a chunk that does not
  // match its checksum throws naming the file and the chunk's file offsets.
  void read(int64_t begin, int64_t count, int32_t* out) const;
  int32_t at(int64_t i) const;

 private:
  void close();
  void open_chunks();  // reads and checks the chunk layout once the header is known
  void verify_chunks(size_t byte_begin, size_t byte_end) const;  // payload byte range

  std::string path_;
  const unsigned char* map_ = nullptr;
  size_t map_bytes_ = 0;
  int64_t num_tokens_ = 0;
  int64_t vocab_size_ = 0;
  TokenDType dtype_ = TokenDType::u16;
  uint32_t version_ = kTokenShardVersion;
  uint64_t checksum_ = 0;
  size_t payload_bytes_ = 0;
  size_t chunk_bytes_ = 0;
  size_t num_chunks_ = 0;
  const unsigned char* chunk_table_ = nullptr;     // version 2: num_chunks_ u64 in the mapping
  std::unique_ptr<std::atomic<bool>[]> verified_;  // per chunk
};

}  // namespace braid::data
