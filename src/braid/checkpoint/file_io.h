// POSIX file I/O for checkpoints, every failure an Error naming the path and the reason
// (strerror), never a short write or read taken for a whole one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace braid::checkpoint {

// A file written front to back, its CRC-32C kept as it goes; fsync()ed by finish(). With
// `direct`, what it can goes past the page cache (O_DIRECT; Note [Direct write]).
class FileSink {
 public:
  static constexpr size_t kDirectBlock = 4096;
  explicit FileSink(std::filesystem::path path, bool direct = false);  // creates or truncates
  ~FileSink();
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;

  void append(const void* data, size_t n);
  void finish();  // fsync and close; append() after it is an error
  int64_t bytes() const { return bytes_; }
  uint32_t crc32c() const { return crc_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_chunks(const char* p, size_t n);
  void buffered();  // O_DIRECT off from here on

  std::filesystem::path path_;
  int fd_ = -1;
  bool direct_ = false;
  int64_t bytes_ = 0;
  uint32_t crc_ = 0;
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
  // CRC-32C of the whole file, read in large blocks.
  uint32_t crc32c() const;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  int64_t size_ = 0;
};

// Writes `text` to path through a temporary file in the same directory, fsynced and renamed
// over it: readers see the old or the new content, never a part.
void write_file_atomically(const std::filesystem::path& path, const std::string& text);
std::string read_small_file(const std::filesystem::path& path);
// fsync of a directory, so a rename or creation inside it survives a crash.
void sync_directory(const std::filesystem::path& dir);

}  // namespace braid::checkpoint
