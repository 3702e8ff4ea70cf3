// POSIX file I/O for checkpoints, every failure an Error naming the path and the reason
// (strerror), never a short write or read taken for a whole one.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace braid::checkpoint {

// A file written front to back, its CRC-32C kept as it goes, and one per block of
// `block_bytes` from its start (Note [Verified reads]); fsync()ed by finish(). With `direct`,
// what it can goes past the page cache (O_DIRECT; Note [Direct write]).
class FileSink {
 public:
  static constexpr size_t kDirectBlock = 4096;
  // Creates or truncates; block_bytes: a multiple of kDirectBlock, 0 for no block checksums.
  explicit FileSink(std::filesystem::path path, bool direct = false, int64_t block_bytes = 0);
  ~FileSink();
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;

  void append(const void* data, size_t n);
  void finish();  // fsync and close; append() after it is an error
  int64_t bytes() const { return bytes_; }
  uint32_t crc32c() const { return crc_; }
  // The CRC-32C of each block of the bytes appended so far (the last one: of what it has yet).
  std::vector<uint32_t> block_crcs() const;
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_chunks(const char* p, size_t n);
  void buffered();  // O_DIRECT off from here on

  std::filesystem::path path_;
  int fd_ = -1;
  bool direct_ = false;
  int64_t bytes_ = 0;
  uint32_t crc_ = 0;
  int64_t block_bytes_ = 0;
  std::vector<uint32_t> blocks_;  // the finished blocks'
  uint32_t block_crc_ = 0;        // of the block being appended to
};

// A file opened for reading at offsets (pread).
class FileSource {
 public:
  explicit FileSource(std::filesystem::path path);
  ~FileSource();
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;

  int64_t size() const { return size_; }
  void read(int64_t offset, void* data, size_t n) const;  // exactly n bytes, or throws
  // Bytes from offset on into the buffers in turn (preadv): exactly their sizes, or throws.
  void read_into(int64_t offset, std::vector<iovec> parts) const;
  // CRC-32C of the whole file, read in large blocks.
  uint32_t crc32c() const;
  const std::filesystem::path& path() const { return path_; }
  // Bytes read so far through this object (tests and benches: what a rank read).
  int64_t bytes_read() const { return bytes_read_.load(); }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  int64_t size_ = 0;
  mutable std::atomic<int64_t> bytes_read_{0};
};

// Writes `text` to path through a temporary file in the same directory, fsynced and renamed
// over it: readers see the old or the new content, never a part.
void write_file_atomically(const std::filesystem::path& path, const std::string& text);
std::string read_small_file(const std::filesystem::path& path);
// fsync of a directory, so a rename or creation inside it survives a crash.
void sync_directory(const std::filesystem::path& dir);

}  // namespace braid::checkpoint
