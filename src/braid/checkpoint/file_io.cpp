#include "braid/checkpoint/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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

FileSink::FileSink(std::filesystem::path path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create", path_);
}

FileSink::~FileSink() {
  if (fd_ >= 0) ::close(fd_);
}

void FileSink::append(const void* data, size_t n) {
  BRAID_CHECK(fd_ >= 0, "writing ", path_.string(), " after it was finished");
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    // Note [Write chunks]: the checksum and the write go a few MiB at a time, so the write
    // copies what the checksum has just brought into the cache.
    const size_t chunk = std::min<size_t>(n, size_t{4} << 20);
    crc_ = checkpoint::crc32c(crc_, p, chunk);
    for (size_t done = 0; done < chunk;) {
      const ssize_t w = ::write(fd_, p + done, chunk - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        if (w == 0) errno = EIO;
        fail("writing", path_);
      }
      done += static_cast<size_t>(w);
      bytes_ += w;
    }
    p += chunk;
    n -= chunk;
  }
}

// Note [Direct write]: with O_DIRECT the disk reads the buffer itself, where a buffered write
// has the kernel copy every byte into the page cache first; so an async save's writer thread
// takes almost no CPU from the training beside it (on this 2-core machine, with both cores
// training, the buffered copy slowed the steps it overlapped by about 15%). The tail past the
// last 4096-byte block, a buffer that is not 4096-byte aligned (small ones) and filesystems that
// refuse O_DIRECT (tmpfs) go through the page cache.
uint32_t write_file_direct(const std::filesystem::path& path, const void* data, int64_t n,
                           const std::function<void()>& before_sync) {
  constexpr int64_t kBlock = 4096;
  constexpr int64_t kChunk = int64_t{8} << 20;
  const auto* p = static_cast<const char*>(data);
  const bool aligned = reinterpret_cast<uintptr_t>(p) % kBlock == 0;
  int fd = aligned ? ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644)
                   : -1;
  bool direct = fd >= 0;
  if (fd < 0 && (!aligned || errno == EINVAL))
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create", path);
  auto buffered = [&] {
    direct = false;
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_DIRECT) != 0) {
      const int e = errno;
      ::close(fd);
      errno = e;
      fail("writing", path);
    }
  };
  auto fail_closed = [&](const char* what) {
    const int e = errno;
    ::close(fd);
    errno = e;
    fail(what, path);
  };
  uint32_t crc = 0;
  int64_t at = 0;
  while (at < n) {
    const int64_t end = direct ? n / kBlock * kBlock : n;
    if (at == end) {
      buffered();  // the tail
      continue;
    }
    const int64_t len = std::min(kChunk, end - at);
    int64_t done = 0;
    while (done < len) {
      const ssize_t w = ::write(fd, p + at + done, static_cast<size_t>(len - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && errno == EINVAL && direct && at == 0 && done == 0) {
        buffered();  // accepted at open, refused at the first transfer
        continue;
      }
      if (w <= 0) {
        if (w == 0) errno = EIO;
        fail_closed("writing");
      }
      done += w;
    }
    crc = checkpoint::crc32c(crc, p + at, static_cast<size_t>(len));
    at += len;
  }
  if (before_sync) before_sync();
  if (::fsync(fd) != 0) fail_closed("syncing");
  if (::close(fd) != 0) fail("closing", path);
  return crc;
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
