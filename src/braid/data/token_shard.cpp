#include "braid/data/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "braid/core/error.h"

namespace braid::data {

static_assert(std::endian::native == std::endian::little, "token shards are little-endian");

namespace {
constexpr char kMagic[8] = {'B', 'R', 'A', 'I', 'D', 'T', 'O', 'K'};

template <typename T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void store(unsigned char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}
}  // namespace

TokenDType token_dtype_for_vocab(int64_t vocab_size) {
  BRAID_CHECK(vocab_size > 0 && vocab_size <= INT32_MAX, "token shard: vocab size ", vocab_size,
              " outside [1, ", INT32_MAX, "]");
  return vocab_size <= 65536 ? TokenDType::u16 : TokenDType::i32;
}

size_t token_dtype_size(TokenDType d) {
  return d == TokenDType::u8 ? 1 : d == TokenDType::u16 ? 2 : 4;
}
const char* token_dtype_name(TokenDType d) {
  return d == TokenDType::u8 ? "u8" : d == TokenDType::u16 ? "u16" : "i32";
}

namespace {
int64_t dtype_limit(TokenDType d) {
  return d == TokenDType::u8 ? 256 : d == TokenDType::u16 ? 65536 : INT32_MAX;
}
}  // namespace

uint64_t shard_checksum(const void* data, size_t nbytes) {
  constexpr uint64_t kPrime = 0x100000001b3ull;
  uint64_t h = 0xcbf29ce484222325ull;
  auto p = static_cast<const unsigned char*>(data);
  size_t i = 0;
  for (; i + 8 <= nbytes; i += 8) h = (h ^ load<uint64_t>(p + i)) * kPrime;
  for (; i < nbytes; ++i) h = (h ^ p[i]) * kPrime;
  return h;
}

namespace {
size_t chunks_of(size_t payload_bytes, size_t chunk_bytes) {
  return payload_bytes / chunk_bytes + (payload_bytes % chunk_bytes != 0 ? 1 : 0);
}
}  // namespace

void write_token_shard(const std::string& path, std::span<const int32_t> ids, int64_t vocab_size,
                       size_t chunk_bytes, std::optional<TokenDType> want) {
  BRAID_CHECK(chunk_bytes > 0, "token shard '", path, "': chunk bytes must be positive");
  const TokenDType dtype = want ? *want : token_dtype_for_vocab(vocab_size);
  BRAID_CHECK(vocab_size <= dtype_limit(dtype), "token shard '", path, "': vocab size ", vocab_size,
              " does not fit dtype ", token_dtype_name(dtype));
  const size_t elem = token_dtype_size(dtype);
  const size_t payload_bytes = ids.size() * elem;
  const size_t num_chunks = chunks_of(payload_bytes, chunk_bytes);
  std::vector<unsigned char> buf(kTokenShardHeaderBytes + payload_bytes + num_chunks * 8, 0);
  unsigned char* payload = buf.data() + kTokenShardHeaderBytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    BRAID_CHECK(ids[i] >= 0 && ids[i] < vocab_size, "token shard '", path, "': token ", i, " is ",
                ids[i], ", outside [0, ", vocab_size, ")");
    if (dtype == TokenDType::u8) {
      payload[i] = static_cast<unsigned char>(ids[i]);
    } else if (dtype == TokenDType::u16) {
      store(payload + i * 2, static_cast<uint16_t>(ids[i]));
    } else {
      store(payload + i * 4, ids[i]);
    }
  }
  std::memcpy(buf.data(), kMagic, 8);
  store(buf.data() + 8, kTokenShardVersion);
  store(buf.data() + 12, static_cast<uint32_t>(dtype));
  store(buf.data() + 16, static_cast<uint64_t>(ids.size()));
  store(buf.data() + 24, static_cast<uint64_t>(vocab_size));
  store(buf.data() + 32, shard_checksum(payload, payload_bytes));
  unsigned char* table = payload + payload_bytes;
  for (size_t c = 0; c < num_chunks; ++c) {
    const size_t begin = c * chunk_bytes;
    store(table + c * 8,
          shard_checksum(payload + begin, std::min(chunk_bytes, payload_bytes - begin)));
  }
  store(buf.data() + 40, static_cast<uint64_t>(chunk_bytes));
  store(buf.data() + 48, shard_checksum(table, num_chunks * 8));

  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  BRAID_CHECK(f != nullptr, "token shard: cannot create '", tmp, "': ", std::strerror(errno));
  size_t written = std::fwrite(buf.data(), 1, buf.size(), f);
  bool ok = written == buf.size() && std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  int saved = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    BRAID_THROW("token shard: writing '", tmp, "' failed after ", written, " of ", buf.size(),
                " bytes: ", std::strerror(saved));
  }
  BRAID_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "token shard: cannot rename '", tmp,
              "' to '", path, "': ", std::strerror(errno));
}

TokenShard::TokenShard(const std::string& path, bool verify_checksum) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  BRAID_CHECK(fd >= 0, "token shard '", path, "': cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int saved = errno;
    ::close(fd);
    BRAID_THROW("token shard '", path, "': cannot stat: ", std::strerror(saved));
  }
  const auto file_bytes = static_cast<size_t>(st.st_size);
  if (file_bytes < kTokenShardHeaderBytes) {
    ::close(fd);
    BRAID_THROW("token shard '", path, "': ", file_bytes, " bytes, too small for the ",
                kTokenShardHeaderBytes, "-byte header");
  }
  void* m = ::mmap(nullptr, file_bytes, PROT_READ, MAP_SHARED, fd, 0);
  int saved = errno;
  ::close(fd);
  BRAID_CHECK(m != MAP_FAILED, "token shard '", path, "': mmap of ", file_bytes,
              " bytes failed: ", std::strerror(saved));
  map_ = static_cast<const unsigned char*>(m);
  map_bytes_ = file_bytes;

  try {
    BRAID_CHECK(std::memcmp(map_, kMagic, 8) == 0, "token shard '", path,
                "': bad magic at offset 0 (expected \"BRAIDTOK\"; not a braid token shard)");
    version_ = load<uint32_t>(map_ + 8);
    BRAID_CHECK(version_ == 1 || version_ == kTokenShardVersion, "token shard '", path,
                "': version ", version_, " at offset 8, this build reads versions 1 and ",
                kTokenShardVersion);
    const auto dtype = load<uint32_t>(map_ + 12);
    BRAID_CHECK(dtype >= 1 && dtype <= 3, "token shard '", path, "': dtype ", dtype,
                " at offset 12, expected 1 (u16), 2 (i32) or 3 (u8)");
    dtype_ = static_cast<TokenDType>(dtype);
    const auto count = load<uint64_t>(map_ + 16);
    const auto vocab = load<uint64_t>(map_ + 24);
    BRAID_CHECK(vocab > 0 && vocab <= INT32_MAX, "token shard '", path, "': vocab size ", vocab,
                " at offset 24 outside [1, ", INT32_MAX, "]");
    BRAID_CHECK(static_cast<int64_t>(vocab) <= dtype_limit(dtype_), "token shard '", path,
                "': vocab size ", vocab, " at offset 24 does not fit dtype ",
                token_dtype_name(dtype_));
    // Everything after the header: the payload, then (version 2) its chunk table.
    const size_t body = file_bytes - kTokenShardHeaderBytes;
    const size_t elem = token_dtype_size(dtype_);
    chunk_bytes_ = version_ == 1 ? 0 : load<uint64_t>(map_ + 40);
    BRAID_CHECK(version_ == 1 || chunk_bytes_ > 0, "token shard '", path,
                "': chunk bytes 0 at offset 40, expected a positive size");
    BRAID_CHECK(count <= body / elem, "token shard '", path, "': token count ", count,
                " at offset 16 needs ", count, " x ", elem, " payload bytes, the file holds ", body,
                " after the header (truncated or corrupt)");
    payload_bytes_ = count * elem;
    num_chunks_ = version_ == 1 ? 1 : chunks_of(payload_bytes_, chunk_bytes_);
    const size_t table = version_ == 1 ? 0 : num_chunks_ * 8;
    BRAID_CHECK(payload_bytes_ + table == body, "token shard '", path, "': token count ", count,
                " at offset 16 needs ", count, " x ", elem, " payload bytes",
                version_ == 1 ? "" : " and a chunk table of " + std::to_string(table) + " bytes",
                ", the file holds ", body, " after the header (truncated or corrupt)");
    num_tokens_ = static_cast<int64_t>(count);
    vocab_size_ = static_cast<int64_t>(vocab);
    checksum_ = load<uint64_t>(map_ + 32);
    if (version_ == 1) chunk_bytes_ = payload_bytes_;
    chunk_table_ = map_ + kTokenShardHeaderBytes + payload_bytes_;
    BRAID_CHECK(version_ == 1 || shard_checksum(chunk_table_, table) == load<uint64_t>(map_ + 48),
                "token shard '", path, "': the chunk table (file bytes [",
                kTokenShardHeaderBytes + payload_bytes_, ", ", file_bytes,
                ")) does not match its checksum at offset 48: corrupt file");
    verified_ = std::make_unique<std::atomic<bool>[]>(num_chunks_);
    BRAID_CHECK(!verify_checksum || this->verify_checksum(), "token shard '", path,
                "': payload checksum does not match the header's (offset 32): corrupt file");
  } catch (...) {
    close();
    throw;
  }
}

TokenShard::~TokenShard() {
  close();
}

TokenShard::TokenShard(TokenShard&& o) noexcept {
  *this = std::move(o);
}

TokenShard& TokenShard::operator=(TokenShard&& o) noexcept {
  if (this != &o) {
    close();
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
    num_tokens_ = o.num_tokens_;
    vocab_size_ = o.vocab_size_;
    dtype_ = o.dtype_;
    version_ = o.version_;
    checksum_ = o.checksum_;
    payload_bytes_ = o.payload_bytes_;
    chunk_bytes_ = o.chunk_bytes_;
    num_chunks_ = o.num_chunks_;
    chunk_table_ = std::exchange(o.chunk_table_, nullptr);
    verified_ = std::move(o.verified_);
  }
  return *this;
}

void TokenShard::close() {
  if (map_ != nullptr) ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

bool TokenShard::verify_checksum() const {
  return shard_checksum(map_ + kTokenShardHeaderBytes, payload_bytes_) == checksum_;
}

// Note [First-touch verification].
void TokenShard::verify_chunks(size_t byte_begin, size_t byte_end) const {
  if (byte_begin >= byte_end) return;
  const unsigned char* payload = map_ + kTokenShardHeaderBytes;
  for (size_t c = byte_begin / chunk_bytes_; c <= (byte_end - 1) / chunk_bytes_; ++c) {
    if (verified_[c].load(std::memory_order_acquire)) continue;
    const size_t begin = c * chunk_bytes_;
    const size_t end = std::min(begin + chunk_bytes_, payload_bytes_);
    const uint64_t sum = shard_checksum(payload + begin, end - begin);
    if (version_ == 1) {
      BRAID_CHECK(sum == checksum_, "token shard '", path_, "': corrupt: the payload (file bytes [",
                  kTokenShardHeaderBytes, ", ", kTokenShardHeaderBytes + end,
                  ")) does not match the checksum at offset 32 (a version 1 shard, checksummed "
                  "whole; braid prepare-data --force rewrites it with a checksum per chunk)");
    } else {
      const size_t entry = kTokenShardHeaderBytes + payload_bytes_ + c * 8;
      BRAID_CHECK(sum == load<uint64_t>(chunk_table_ + c * 8), "token shard '", path_,
                  "': corrupt: chunk ", c, " (file bytes [", kTokenShardHeaderBytes + begin, ", ",
                  kTokenShardHeaderBytes + end, ")) does not match its checksum at offset ", entry);
    }
    verified_[c].store(true, std::memory_order_release);
  }
}

void TokenShard::read(int64_t begin, int64_t count, int32_t* out) const {
  BRAID_CHECK(begin >= 0 && count >= 0 && begin + count <= num_tokens_, "token shard '", path_,
              "': read of tokens [", begin, ", ", begin + count, ") past its ", num_tokens_,
              " tokens");
  const size_t elem = token_dtype_size(dtype_);
  verify_chunks(static_cast<size_t>(begin) * elem, static_cast<size_t>(begin + count) * elem);
  const unsigned char* p = map_ + kTokenShardHeaderBytes;
  if (dtype_ == TokenDType::i32) {
    std::memcpy(out, p + begin * 4, static_cast<size_t>(count) * 4);
  } else if (dtype_ == TokenDType::u8) {
    for (int64_t i = 0; i < count; ++i) out[i] = p[begin + i];
  } else {
    for (int64_t i = 0; i < count; ++i) out[i] = load<uint16_t>(p + (begin + i) * 2);
  }
}

int32_t TokenShard::at(int64_t i) const {
  int32_t v;
  read(i, 1, &v);
  return v;
}

}  // namespace braid::data
