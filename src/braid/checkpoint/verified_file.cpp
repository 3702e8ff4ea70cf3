#include "braid/checkpoint/verified_file.h"

#include <algorithm>

#include "braid/checkpoint/crc32c.h"
#include "braid/core/error.h"

namespace braid::checkpoint {

namespace {
// Unchecked blocks read by one preadv at most, so their checksums are taken over bytes that are
// still in the cache.
constexpr int64_t kRunBlocks = 8;
}  // namespace

VerifiedFile::VerifiedFile(std::unique_ptr<FileSource> src, int64_t block_bytes,
                           std::vector<uint32_t> blocks, int64_t data_bytes, std::string where)
    : src_(std::move(src)),
      block_bytes_(block_bytes),
      blocks_(std::move(blocks)),
      data_bytes_(data_bytes),
      where_(std::move(where)),
      checked_(blocks_.size(), false) {
  BRAID_CHECK(
      block_bytes_ > 0 && data_bytes_ <= src_->size() &&
          static_cast<int64_t>(blocks_.size()) == (data_bytes_ + block_bytes_ - 1) / block_bytes_,
      where_, ": ", blocks_.size(), " block checksums of ", block_bytes_,
      " bytes do not cover its ", data_bytes_, " bytes of pieces (the file is damaged)");
}

int64_t VerifiedFile::block_end(int64_t k) const {
  return std::min(data_bytes_, (k + 1) * block_bytes_);
}

std::string VerifiedFile::first_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void VerifiedFile::bad_block(int64_t k, uint32_t crc) {
  std::string message = where_ + " has checksum " + format_crc32c(crc) + " in block " +
                        std::to_string(k) + " (bytes [" + std::to_string(k * block_bytes_) + ", " +
                        std::to_string(block_end(k)) + ")), its table and the manifest say " +
                        format_crc32c(blocks_[static_cast<size_t>(k)]) + " (the file is corrupt)";
  if (!deferred_) throw Error(message);
  if (error_.empty()) error_ = std::move(message);
}

void VerifiedFile::read(int64_t offset, void* data, size_t n) {
  if (n == 0) return;
  const int64_t end = offset + static_cast<int64_t>(n);
  BRAID_CHECK(offset >= 0 && end <= data_bytes_, where_, ": bytes [", offset, ", ", end,
              ") lie past the ", data_bytes_, " bytes its block checksums cover");
  std::lock_guard<std::mutex> lock(mu_);
  auto* out = static_cast<char*>(data);
  for (int64_t k = offset / block_bytes_, last = (end - 1) / block_bytes_; k <= last;) {
    // Blocks [k, k1): all checked, or all unchecked (at most kRunBlocks of them).
    const bool checked = checked_[static_cast<size_t>(k)];
    int64_t k1 = k + 1;
    while (k1 <= last && checked_[static_cast<size_t>(k1)] == checked &&
           (checked || k1 - k < kRunBlocks))
      ++k1;
    const int64_t a = std::max(offset, k * block_bytes_), b = std::min(end, block_end(k1 - 1));
    if (checked)
      src_->read(a, out + (a - offset), static_cast<size_t>(b - a));
    else
      read_unchecked(k, k1, a, b, out + (a - offset));
    k = k1;
  }
}

void VerifiedFile::read_unchecked(int64_t k0, int64_t k1, int64_t a, int64_t b, char* to) {
  const int64_t s = k0 * block_bytes_, e = block_end(k1 - 1);
  if (scratch_.empty()) scratch_.resize(static_cast<size_t>(2 * block_bytes_));
  // The run in file order: its head before `a` (inside block k0), the wanted bytes, its tail
  // after `b` (inside block k1 - 1).
  struct Part {
    int64_t at, n;
    char* p;
  };
  const Part parts[3] = {
      {s, a - s, scratch_.data()}, {a, b - a, to}, {b, e - b, scratch_.data() + block_bytes_}};
  std::vector<iovec> io;
  for (const Part& p : parts)
    if (p.n > 0) io.push_back({p.p, static_cast<size_t>(p.n)});
  src_->read_into(s, io);
  for (int64_t k = k0; k < k1; ++k) {
    const int64_t lo = k * block_bytes_, hi = block_end(k);
    uint32_t crc = 0;
    for (const Part& p : parts) {
      const int64_t x = std::max(lo, p.at), y = std::min(hi, p.at + p.n);
      if (x < y) crc = crc32c(crc, p.p + (x - p.at), static_cast<size_t>(y - x));
    }
    if (crc != blocks_[static_cast<size_t>(k)]) bad_block(k, crc);
    checked_[static_cast<size_t>(k)] = true;
  }
}

void VerifiedFile::verify_all() {
  std::lock_guard<std::mutex> lock(mu_);
  const bool deferred = deferred_;
  deferred_ = false;  // a bad block throws here
  try {
    std::vector<char> buf(static_cast<size_t>(std::min(data_bytes_, kRunBlocks * block_bytes_)));
    for (int64_t k = 0; k < static_cast<int64_t>(blocks_.size()); k += kRunBlocks) {
      const int64_t k1 = std::min<int64_t>(k + kRunBlocks, static_cast<int64_t>(blocks_.size()));
      read_unchecked(k, k1, k * block_bytes_, block_end(k1 - 1), buf.data());
    }
  } catch (...) {
    deferred_ = deferred;
    throw;
  }
  deferred_ = deferred;
}

}  // namespace braid::checkpoint
