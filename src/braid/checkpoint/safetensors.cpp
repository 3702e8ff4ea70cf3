#include "braid/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

namespace braid::checkpoint {

namespace {

// The safetensors reference implementation refuses headers over 100 MB.
constexpr int64_t kMaxHeaderBytes = 100'000'000;

std::string errno_text() {
  return std::strerror(errno);
}

}  // namespace

std::string_view safetensors_dtype_name(DType d) {
  switch (d) {
    case DType::f32:
      return "F32";
    case DType::bf16:
      return "BF16";
    case DType::f16:
      return "F16";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
    case DType::u8:
      return "U8";
  }
  return "?";
}

DType safetensors_dtype_from_name(std::string_view n) {
  if (n == "F32") return DType::f32;
  if (n == "BF16") return DType::bf16;
  if (n == "F16") return DType::f16;
  if (n == "I32") return DType::i32;
  if (n == "I64") return DType::i64;
  if (n == "U8") return DType::u8;
  BRAID_THROW("unsupported safetensors dtype '", n, "' (braid reads F32, BF16, F16, I32, I64, U8)");
}

// ---------------------------------------------------------------------------------------------
// Reader

SafetensorsReader::SafetensorsReader(const std::filesystem::path& path) : path_(path) {
  const std::string f = path.string();
  fd_ = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
  BRAID_CHECK(fd_ >= 0, "safetensors: cannot open ", f, ": ", errno_text());
  struct stat st {};
  BRAID_CHECK(::fstat(fd_, &st) == 0, "safetensors: cannot stat ", f, ": ", errno_text());
  file_size_ = static_cast<int64_t>(st.st_size);
  BRAID_CHECK(file_size_ >= 8, "safetensors: ", f, " has ", file_size_,
              " bytes, too short for the 8-byte header length");

  uint64_t n = 0;
  read_bytes(&n, 0, 8, "header length");
  BRAID_CHECK(n <= static_cast<uint64_t>(file_size_ - 8), "safetensors: ", f, ": header length ", n,
              " exceeds the ", file_size_ - 8, " bytes after the length field");
  BRAID_CHECK(static_cast<int64_t>(n) <= kMaxHeaderBytes, "safetensors: ", f, ": header length ", n,
              " exceeds the limit of ", kMaxHeaderBytes, " bytes");
  data_start_ = 8 + static_cast<int64_t>(n);
  const int64_t data_size = file_size_ - data_start_;

  std::string text(n, '\0');
  read_bytes(text.data(), 8, static_cast<int64_t>(n), "header");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    BRAID_THROW("safetensors: ", f, ": header is not valid JSON: ", e.what());
  }
  BRAID_CHECK(header.is_object(), "safetensors: ", f, ": header is not a JSON object");

  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      BRAID_CHECK(info.is_object(), "safetensors: ", f, ": __metadata__ is not an object");
      for (const auto& [k, v] : info.items()) {
        BRAID_CHECK(v.is_string(), "safetensors: ", f, ": __metadata__ value of '", k,
                    "' is not a string");
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    auto where = [&] { return detail::concat("safetensors: ", f, ": tensor '", name, "'"); };
    BRAID_CHECK(info.is_object(), where(), ": entry is not an object");
    for (const auto& [k, v] : info.items()) {
      BRAID_CHECK(k == "dtype" || k == "shape" || k == "data_offsets", where(), ": unknown field '",
                  k, "'");
      (void)v;
    }
    BRAID_CHECK(info.contains("dtype") && info["dtype"].is_string(), where(),
                ": missing or non-string 'dtype'");
    BRAID_CHECK(info.contains("shape") && info["shape"].is_array(), where(),
                ": missing or non-array 'shape'");
    BRAID_CHECK(info.contains("data_offsets") && info["data_offsets"].is_array() &&
                    info["data_offsets"].size() == 2,
                where(), ": 'data_offsets' must be an array of two integers");
    SafetensorsEntry e;
    e.name = name;
    try {
      e.dtype = safetensors_dtype_from_name(info["dtype"].get<std::string>());
    } catch (const Error& err) {
      BRAID_THROW(where(), ": ", err.what());
    }
    std::vector<int64_t> dims;
    for (const auto& d : info["shape"]) {
      BRAID_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, where(),
                  ": shape entries must be non-negative integers, got ", d.dump());
      dims.push_back(d.get<int64_t>());
    }
    BRAID_CHECK(static_cast<int>(dims.size()) <= Shape::kMaxDims, where(), ": ", dims.size(),
                " dimensions exceed the maximum of ", Shape::kMaxDims);
    e.shape = Shape(dims);
    for (const auto& o : info["data_offsets"]) {
      BRAID_CHECK(o.is_number_integer() && o.get<int64_t>() >= 0, where(),
                  ": data_offsets must be non-negative integers, got ", o.dump());
    }
    e.begin = info["data_offsets"][0].get<int64_t>();
    e.end = info["data_offsets"][1].get<int64_t>();
    BRAID_CHECK(e.begin <= e.end, where(), ": data_offsets [", e.begin, ", ", e.end,
                ") are reversed");
    const int64_t want = e.shape.numel() * static_cast<int64_t>(dtype_size(e.dtype));
    BRAID_CHECK(e.end - e.begin == want, where(), ": data_offsets [", e.begin, ", ", e.end,
                ") hold ", e.end - e.begin, " bytes but shape ", e.shape.str(), " of ",
                safetensors_dtype_name(e.dtype), " needs ", want);
    BRAID_CHECK(e.end <= data_size, where(), ": data_offsets [", e.begin, ", ", e.end,
                ") run past the end of the data section (", data_size, " bytes)");
    entries_.push_back(std::move(e));
  }

  std::sort(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < entries_.size(); ++i) {
    const auto& a = entries_[i - 1];
    const auto& b = entries_[i];
    BRAID_CHECK(b.begin >= a.end || a.begin == a.end || b.begin == b.end, "safetensors: ", f,
                ": tensors '", a.name, "' [", a.begin, ", ", a.end, ") and '", b.name, "' [",
                b.begin, ", ", b.end, ") overlap");
  }
  for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].name] = i;
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsEntry* SafetensorsReader::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &entries_[it->second];
}

const SafetensorsEntry& SafetensorsReader::entry(std::string_view name) const {
  const SafetensorsEntry* e = find(name);
  BRAID_CHECK(e != nullptr, "safetensors: ", path_.string(), " has no tensor '", name, "'");
  return *e;
}

void SafetensorsReader::read_bytes(void* dst, int64_t file_offset, int64_t n,
                                   std::string_view what) const {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t got = ::pread(fd_, p, static_cast<size_t>(n), file_offset);
    if (got < 0 && errno == EINTR) continue;
    BRAID_CHECK(got > 0, "safetensors: ", path_.string(), ": reading ", what, " at byte ",
                file_offset, " failed: ", got < 0 ? errno_text() : "unexpected end of file");
    p += got;
    n -= got;
    file_offset += got;
  }
}

Tensor SafetensorsReader::read(std::string_view name) const {
  const SafetensorsEntry& e = entry(name);
  Tensor t = Tensor::empty(e.shape, e.dtype);
  if (t.nbytes() > 0) read_bytes(t.raw_data(), data_start_ + e.begin, e.end - e.begin, e.name);
  return t;
}

void SafetensorsReader::read_into(std::string_view name, Tensor& dst, int64_t elem_offset) const {
  const SafetensorsEntry& e = entry(name);
  const int64_t n = dst.numel();
  BRAID_CHECK(elem_offset >= 0 && elem_offset + n <= e.shape.numel(),
              "safetensors: ", path_.string(), ": tensor '", e.name, "': elements [", elem_offset,
              ", ", elem_offset + n, ") out of range for shape ", e.shape.str());
  if (n == 0) return;
  const int64_t es = static_cast<int64_t>(dtype_size(e.dtype));
  const int64_t at = data_start_ + e.begin + elem_offset * es;
  if (dst.dtype() == e.dtype) {
    read_bytes(dst.raw_data(), at, n * es, e.name);
    return;
  }
  BRAID_CHECK(is_floating(dst.dtype()) && is_floating(e.dtype), "safetensors: ", path_.string(),
              ": tensor '", e.name, "' is ", safetensors_dtype_name(e.dtype),
              " and cannot be read into a ", dtype_name(dst.dtype()), " tensor");
  Tensor tmp = Tensor::empty(Shape{n}, e.dtype, MemCategory::other);
  read_bytes(tmp.raw_data(), at, n * es, e.name);
  Tensor flat = dst.flatten();
  flat.copy_(tmp);
}

// ---------------------------------------------------------------------------------------------
// Writer

SafetensorsWriter::SafetensorsWriter(const std::filesystem::path& path,
                                     std::vector<TensorSpec> tensors,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), tmp_path_(path.string() + ".tmp"), specs_(std::move(tensors)) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  int64_t offset = 0;
  for (const auto& s : specs_) {
    BRAID_CHECK(!s.name.empty() && s.name != "__metadata__", "safetensors: ", path_.string(),
                ": invalid tensor name '", s.name, "'");
    BRAID_CHECK(!header.contains(s.name), "safetensors: ", path_.string(), ": tensor '", s.name,
                "' listed twice");
    const int64_t bytes = s.shape.numel() * static_cast<int64_t>(dtype_size(s.dtype));
    header[s.name] = {{"dtype", safetensors_dtype_name(s.dtype)},
                      {"shape", s.shape.vec()},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data section starts 8-byte aligned

  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  BRAID_CHECK(fd_ >= 0, "safetensors: cannot create ", tmp_path_.string(), ": ", errno_text());
  uint64_t n = text.size();
  write_raw(&n, 8);
  write_raw(text.data(), static_cast<int64_t>(text.size()));
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_) {
    std::error_code ec;
    std::filesystem::remove(tmp_path_, ec);
  }
}

void SafetensorsWriter::write_raw(const void* data, int64_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t put = ::write(fd_, p, static_cast<size_t>(n));
    if (put < 0 && errno == EINTR) continue;
    BRAID_CHECK(put > 0, "safetensors: writing ", tmp_path_.string(), " failed: ", errno_text());
    p += put;
    n -= put;
  }
}

void SafetensorsWriter::write(std::string_view name, const Tensor& t) {
  BRAID_CHECK(
      current_ < specs_.size() && current_done_ == 0, "safetensors: ", path_.string(), ": write('",
      name, "') but ",
      current_ < specs_.size() ? "the previous tensor is incomplete" : "all tensors are written");
  BRAID_CHECK(t.shape() == specs_[current_].shape, "safetensors: ", path_.string(), ": tensor '",
              name, "' has shape ", t.shape().str(), ", header says ",
              specs_[current_].shape.str());
  append(name, t);
}

void SafetensorsWriter::append(std::string_view name, const Tensor& piece) {
  BRAID_CHECK(!finished_ && fd_ >= 0, "safetensors: ", path_.string(), ": append after finish");
  // Zero-element tensors are complete as soon as their turn comes.
  while (current_ < specs_.size() && specs_[current_].shape.numel() == 0 &&
         specs_[current_].name != name) {
    ++current_;
  }
  BRAID_CHECK(current_ < specs_.size(), "safetensors: ", path_.string(), ": tensor '", name,
              "' written after all tensors were complete");
  const TensorSpec& s = specs_[current_];
  BRAID_CHECK(s.name == name, "safetensors: ", path_.string(), ": expected tensor '", s.name,
              "' next (header order), got '", name, "'");
  const int64_t total = s.shape.numel();
  BRAID_CHECK(current_done_ + piece.numel() <= total, "safetensors: ", path_.string(), ": tensor '",
              name, "': ", current_done_ + piece.numel(), " elements written, header says ", total);
  if (piece.numel() > 0) {
    if (piece.dtype() == s.dtype) {
      write_raw(piece.raw_data(), static_cast<int64_t>(piece.nbytes()));
    } else {
      BRAID_CHECK(is_floating(piece.dtype()) && is_floating(s.dtype),
                  "safetensors: ", path_.string(), ": tensor '", name, "' is ",
                  dtype_name(piece.dtype()), " but the header says ",
                  safetensors_dtype_name(s.dtype));
      Tensor c = Tensor::empty(Shape{piece.numel()}, s.dtype, MemCategory::other);
      c.copy_(piece.flatten());
      write_raw(c.raw_data(), static_cast<int64_t>(c.nbytes()));
    }
  }
  current_done_ += piece.numel();
  if (current_done_ == total) {
    ++current_;
    current_done_ = 0;
  }
}

void SafetensorsWriter::finish() {
  while (current_ < specs_.size() && specs_[current_].shape.numel() == 0) ++current_;
  BRAID_CHECK(current_ == specs_.size(), "safetensors: ", path_.string(), ": finish() with ",
              specs_.size() - current_, " tensor(s) unwritten, starting with '",
              current_ < specs_.size() ? specs_[current_].name : "", "'");
  BRAID_CHECK(::fsync(fd_) == 0, "safetensors: fsync ", tmp_path_.string(), ": ", errno_text());
  BRAID_CHECK(::close(fd_) == 0, "safetensors: close ", tmp_path_.string(), ": ", errno_text());
  fd_ = -1;
  std::error_code ec;
  std::filesystem::rename(tmp_path_, path_, ec);
  BRAID_CHECK(!ec, "safetensors: renaming ", tmp_path_.string(), " to ", path_.string(), ": ",
              ec.message());
  finished_ = true;
}

// ---------------------------------------------------------------------------------------------

void save_safetensors(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  for (const auto& [name, t] : tensors) specs.push_back({name, t.dtype(), t.shape()});
  SafetensorsWriter w(path, std::move(specs), metadata);
  for (const auto& [name, t] : tensors) w.write(name, t);
  w.finish();
}

std::map<std::string, Tensor> load_safetensors(const std::filesystem::path& path) {
  SafetensorsReader r(path);
  std::map<std::string, Tensor> out;
  for (const auto& e : r.entries()) out[e.name] = r.read(e.name);
  return out;
}

}  // namespace braid::checkpoint
