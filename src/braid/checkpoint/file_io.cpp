#include "braid/checkpoint/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <vector>

#include "braid/checkpoint/crc32c.h"
#include "braid/core/error.h"

namespace braid::checkpoint {

namespace {
[[noreturn]] void fail(const char* what, const std::filesystem::path& path) {
  BRAID_THROW(what, " ", path.string(), ": ", std::strerror(errno));
}
}  // namespace

FileSink::FileSink(std::filesystem::path path, bool direct, int64_t block_bytes)
    : path_(std::move(path)), block_bytes_(block_bytes) {
  BRAID_CHECK(block_bytes % static_cast<int64_t>(kDirectBlock) == 0,
              "FileSink: blocks of whole pages");
  constexpr int kFlags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  if (direct) fd_ = ::open(path_.c_str(), kFlags | O_DIRECT, 0644);
  direct_ = fd_ >= 0;
  if (fd_ < 0 && (!direct || errno == EINVAL)) fd_ = ::open(path_.c_str(), kFlags, 0644);
  if (fd_ < 0) fail("cannot create", path_);
}

FileSink::~FileSink() {
  if (fd_ >= 0) ::close(fd_);
}

// Note [Direct write]: with O_DIRECT the disk reads the buffer itself, where a buffered write
// has the kernel copy every byte into the page cache first; so an async save's writer thread
// takes almost no CPU from the training beside it (on this 2-core machine, with both cores
// training, the buffered copy slowed the steps it overlapped by about 15%). O_DIRECT takes whole
// 4096-byte blocks from aligned memory at aligned offsets: the rest (a file's tail, a small
// unaligned buffer) and filesystems that refuse O_DIRECT (tmpfs, at open or at the first write)
// go through the page cache.
void FileSink::append(const void* data, size_t n) {
  BRAID_CHECK(fd_ >= 0, "writing ", path_.string(), " after it was finished");
  const auto* p = static_cast<const char*>(data);
  if (direct_) {
    const bool aligned = reinterpret_cast<uintptr_t>(p) % kDirectBlock == 0 &&
                         bytes_ % static_cast<int64_t>(kDirectBlock) == 0;
    const size_t whole = aligned ? n / kDirectBlock * kDirectBlock : 0;
    write_chunks(p, whole);
    p += whole;
    n -= whole;
    if (n > 0) buffered();
  }
  write_chunks(p, n);
}

void FileSink::buffered() {
  if (!direct_) return;
  direct_ = false;
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) != 0) fail("writing", path_);
}

void FileSink::write_chunks(const char* p, size_t n) {
  while (n > 0) {
    // Note [Write chunks]: the checksum and the write go a few MiB at a time, so the write
    // copies what the checksum has just brought into the cache; a chunk ends where a block
    // does (whole pages, so O_DIRECT's alignment holds).
    size_t chunk = std::min<size_t>(n, size_t{4} << 20);
    if (block_bytes_ > 0)
      chunk = std::min<size_t>(chunk, static_cast<size_t>(block_bytes_ - bytes_ % block_bytes_));
    crc_ = checkpoint::crc32c(crc_, p, chunk);
    if (block_bytes_ > 0) block_crc_ = checkpoint::crc32c(block_crc_, p, chunk);
    for (size_t done = 0; done < chunk;) {
      const ssize_t w = ::write(fd_, p + done, chunk - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && errno == EINVAL && direct_ && bytes_ == 0) {
        buffered();  // accepted at open, refused at the first write
        continue;
      }
      if (w <= 0) {
        if (w == 0) errno = EIO;
        fail("writing", path_);
      }
      done += static_cast<size_t>(w);
      bytes_ += w;
    }
    if (block_bytes_ > 0 && bytes_ % block_bytes_ == 0) {
      blocks_.push_back(block_crc_);
      block_crc_ = 0;
    }
    p += chunk;
    n -= chunk;
  }
}

std::vector<uint32_t> FileSink::block_crcs() const {
  std::vector<uint32_t> all = blocks_;
  if (block_bytes_ > 0 && bytes_ % block_bytes_ != 0) all.push_back(block_crc_);
  return all;
}

void FileSink::finish() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    fail("syncing", path_);
  }
  if (::close(fd) != 0) fail("closing", path_);
}

FileSource::FileSource(std::filesystem::path path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail("cannot open", path_);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail("cannot stat", path_);
  size_ = st.st_size;
}

FileSource::~FileSource() {
  if (fd_ >= 0) ::close(fd_);
}

void FileSource::read(int64_t offset, void* data, size_t n) const {
  BRAID_CHECK(offset >= 0 && offset + static_cast<int64_t>(n) <= size_, path_.string(),
              ": reading bytes [", offset, ", ", offset + static_cast<int64_t>(n),
              ") past its end (", size_, " bytes; truncated?)");
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::pread(fd_, p, std::min<size_t>(n, size_t{1} << 30), offset);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = EIO;
      fail("reading", path_);
    }
    p += r;
    n -= static_cast<size_t>(r);
    offset += r;
    bytes_read_ += r;
  }
}

void FileSource::read_into(int64_t offset, std::vector<iovec> parts) const {
  int64_t n = 0;
  for (const iovec& v : parts) n += static_cast<int64_t>(v.iov_len);
  BRAID_CHECK(offset >= 0 && offset + n <= size_, path_.string(), ": reading bytes [", offset, ", ",
              offset + n, ") past its end (", size_, " bytes; truncated?)");
  size_t first = 0;
  while (first < parts.size()) {
    const int count = static_cast<int>(std::min<size_t>(parts.size() - first, IOV_MAX));
    const ssize_t r = ::preadv(fd_, parts.data() + first, count, offset);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = EIO;
      fail("reading", path_);
    }
    offset += r;
    bytes_read_ += r;
    // Past what came: whole buffers dropped, a part-filled one advanced.
    for (size_t got = static_cast<size_t>(r); got > 0 && first < parts.size();) {
      const size_t take = std::min(got, parts[first].iov_len);
      parts[first].iov_base = static_cast<char*>(parts[first].iov_base) + take;
      parts[first].iov_len -= take;
      got -= take;
      if (parts[first].iov_len == 0) ++first;
    }
    while (first < parts.size() && parts[first].iov_len == 0) ++first;
  }
}

uint32_t FileSource::crc32c() const {
  constexpr size_t kBlock = size_t{8} << 20;
  std::vector<char> buf(kBlock);
  uint32_t crc = 0;
  for (int64_t at = 0; at < size_;) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(kBlock, size_ - at));
    read(at, buf.data(), n);
    crc = checkpoint::crc32c(crc, buf.data(), n);
    at += static_cast<int64_t>(n);
  }
  return crc;
}

void write_file_atomically(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    FileSink sink(tmp);
    sink.append(text.data(), text.size());
    sink.finish();
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  BRAID_CHECK(!ec, "cannot rename ", tmp.string(), " to ", path.string(), ": ", ec.message());
  sync_directory(path.parent_path());
}

std::string read_small_file(const std::filesystem::path& path) {
  FileSource src(path);
  std::string s(static_cast<size_t>(src.size()), '\0');
  src.read(0, s.data(), s.size());
  return s;
}

void sync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("cannot open directory", dir);
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  errno = e;
  if (rc != 0) fail("syncing directory", dir);
}

}  // namespace braid::checkpoint
