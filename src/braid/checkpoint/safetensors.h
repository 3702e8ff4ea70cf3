// safetensors files (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end)}, and an
// optional "__metadata__" string map}, then the raw little-endian tensor bytes with offsets
// relative to the end of the header.
//
// The reader validates everything before handing out data (header length, JSON, dtype
// names, byte counts, offsets in range and non-overlapping) and reads tensors, or element
// ranges of them, straight into caller-owned tensors (flat-buffer views, shards). The writer
// streams: it writes the header first, then the tensors one by one (or piece by piece), to
// `<path>.tmp`, and renames it over `path` in finish(), so no caller ever holds the whole file
// in memory and a failed write never leaves a half-written file under the final name.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "braid/core/tensor.h"

namespace braid::checkpoint {

struct TensorSpec {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
};

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  int64_t begin = 0;  // byte offsets into the data section
  int64_t end = 0;
};

// "F32", "BF16", ... and back; unknown names throw naming the name.
std::string_view safetensors_dtype_name(DType d);
DType safetensors_dtype_from_name(std::string_view name);

class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::filesystem::path& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // file order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(std::string_view name) const { return index_.count(std::string(name)) > 0; }
  const SafetensorsEntry* find(std::string_view name) const;
  const SafetensorsEntry& entry(std::string_view name) const;  // throws naming file + tensor

  // A new tensor in the file's dtype, allocated under the current MemoryScope.
  Tensor read(std::string_view name) const;
  // Reads flat elements [elem_offset, elem_offset + dst.numel()) of tensor `name` into dst,
  // converting dtype when they differ (floating types only).
  void read_into(std::string_view name, Tensor& dst, int64_t elem_offset = 0) const;

 private:
  void read_bytes(void* dst, int64_t file_offset, int64_t n, std::string_view what) const;

  std::filesystem::path path_;
  int fd_ = -1;
  int64_t file_size_ = 0;
  int64_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

class SafetensorsWriter {
 public:
  // Lays the tensors out contiguously in the given order and writes the header.
  SafetensorsWriter(const std::filesystem::path& path, std::vector<TensorSpec> tensors,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();  // removes the temporary file unless finish() succeeded
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Writes the next whole tensor; name and shape must match the spec. A floating tensor of
  // another dtype is converted to the spec's dtype.
  void write(std::string_view name, const Tensor& t);
  // Streams the next piece of the current tensor (flat elements, in order). The tensor is
  // complete when all its elements arrived; `name` must be the tensor's.
  void append(std::string_view name, const Tensor& piece);
  // Checks every tensor was written completely, flushes, fsyncs and renames into place.
  void finish();

 private:
  void write_raw(const void* data, int64_t n);

  std::filesystem::path path_;
  std::filesystem::path tmp_path_;
  std::vector<TensorSpec> specs_;
  size_t current_ = 0;        // index of the tensor being written
  int64_t current_done_ = 0;  // elements of it written so far
  int fd_ = -1;
  bool finished_ = false;
};

// Convenience wrappers over the two classes (tests, small files).
void save_safetensors(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
std::map<std::string, Tensor> load_safetensors(const std::filesystem::path& path);

}  // namespace braid::checkpoint
