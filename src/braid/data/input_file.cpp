#include "braid/data/input_file.h"

#include <sys/stat.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "braid/core/error.h"

namespace braid::data {

namespace {

constexpr size_t kBlockBytes = size_t{1} << 20;
constexpr unsigned char kGzipMagic[] = {0x1f, 0x8b};
constexpr unsigned char kZstdMagic[] = {0x28, 0xb5, 0x2f, 0xfd};

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string hex_bytes(const char* p, size_t n) {
  std::string out;
  char b[4];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(b, sizeof(b), "%s%02x", i == 0 ? "" : " ", static_cast<unsigned char>(p[i]));
    out += b;
  }
  return out;
}

const char* format_name(Compression c) {
  return c == Compression::gzip ? "gzip" : "zstd";
}

}  // namespace

Compression compression_of(std::string_view path) {
  if (ends_with(path, ".gz")) return Compression::gzip;
  if (ends_with(path, ".zst")) return Compression::zstd;
  return Compression::none;
}

std::string_view strip_compression(std::string_view path) {
  switch (compression_of(path)) {
    case Compression::gzip:
      return path.substr(0, path.size() - 3);
    case Compression::zstd:
      return path.substr(0, path.size() - 4);
    case Compression::none:
      break;
  }
  return path;
}

struct InputFile::Decoder {
  z_stream z{};
  bool z_open = false;
  ZSTD_DStream* zstd = nullptr;
  bool output_pending = false;  // the last call filled its output: the decoder may hold more

  ~Decoder() {
    if (z_open) inflateEnd(&z);
    if (zstd != nullptr) ZSTD_freeDStream(zstd);
  }
};

InputFile::InputFile(std::string path)
    : path_(std::move(path)), compression_(compression_of(path_)) {
  file_ = std::fopen(path_.c_str(), "rb");
  BRAID_CHECK(file_ != nullptr, "cannot open '", path_, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fileno(file_), &st) == 0) size_ = static_cast<int64_t>(st.st_size);
  if (compression_ == Compression::none) return;

  in_ = std::make_unique<char[]>(kBlockBytes);
  decoder_ = std::make_unique<Decoder>();
  const std::string_view magic =
      compression_ == Compression::gzip
          ? std::string_view(reinterpret_cast<const char*>(kGzipMagic), sizeof(kGzipMagic))
          : std::string_view(reinterpret_cast<const char*>(kZstdMagic), sizeof(kZstdMagic));
  const size_t got = fill_input();
  BRAID_CHECK(got >= magic.size() && std::string_view(in_.get(), magic.size()) == magic, "'", path_,
              "' is named as ", format_name(compression_), " but is not ",
              format_name(compression_), " data: it starts with ",
              got == 0 ? std::string("nothing (an empty file)")
                       : "bytes " + hex_bytes(in_.get(), std::min(got, magic.size())),
              ", ", format_name(compression_), " with ", hex_bytes(magic.data(), magic.size()));
  if (compression_ == Compression::gzip) {
    // 16 + MAX_WBITS: a gzip header and trailer (the CRC-32 and length are checked).
    BRAID_CHECK(inflateInit2(&decoder_->z, 16 + MAX_WBITS) == Z_OK, "'", path_,
                "': zlib cannot start a gzip stream");
    decoder_->z_open = true;
  } else {
    decoder_->zstd = ZSTD_createDStream();
    BRAID_CHECK(decoder_->zstd != nullptr, "'", path_, "': libzstd cannot start a stream");
  }
  stream_done_ = false;
}

InputFile::~InputFile() {
  if (file_ != nullptr) std::fclose(file_);
}

size_t InputFile::fill_input() {
  const size_t got = std::fread(in_.get(), 1, kBlockBytes, file_);
  BRAID_CHECK(got > 0 || !std::ferror(file_), "cannot read '", path_, "' after ", file_bytes_read_,
              " bytes: ", std::strerror(errno));
  in_begin_ = 0;
  in_end_ = got;
  file_bytes_read_ += static_cast<int64_t>(got);
  return got;
}

size_t InputFile::read(char* out, size_t n) {
  if (n == 0) return 0;
  if (compression_ == Compression::none) {
    const size_t got = std::fread(out, 1, n, file_);
    BRAID_CHECK(got > 0 || !std::ferror(file_), "cannot read '", path_, "' after ",
                file_bytes_read_, " bytes: ", std::strerror(errno));
    file_bytes_read_ += static_cast<int64_t>(got);
    return got;
  }
  Decoder& d = *decoder_;
  while (true) {
    if (in_begin_ == in_end_ && !d.output_pending && fill_input() == 0) {
      BRAID_CHECK(stream_done_, "'", path_, "': truncated ", format_name(compression_),
                  " data: the file ends (at byte ", file_bytes_read_,
                  ") inside a compressed stream");
      return 0;
    }
    // Where the decoder stands in the file, for errors: the byte after the last one it took.
    const size_t avail = in_end_ - in_begin_;
    size_t produced = 0;
    if (compression_ == Compression::gzip) {
      if (stream_done_ && avail > 0) {
        inflateReset(&d.z);  // another gzip member follows (as `cat a.gz b.gz` makes)
      }
      d.z.next_in = reinterpret_cast<Bytef*>(in_.get() + in_begin_);
      d.z.avail_in = static_cast<uInt>(avail);
      d.z.next_out = reinterpret_cast<Bytef*>(out);
      d.z.avail_out = static_cast<uInt>(std::min<size_t>(n, UINT32_MAX));
      const int ret = inflate(&d.z, Z_NO_FLUSH);
      in_begin_ = in_end_ - d.z.avail_in;
      produced = std::min<size_t>(n, UINT32_MAX) - d.z.avail_out;
      BRAID_CHECK(ret == Z_OK || ret == Z_STREAM_END || ret == Z_BUF_ERROR, "'", path_,
                  "': corrupt gzip data near byte ",
                  file_bytes_read_ - static_cast<int64_t>(in_end_ - in_begin_), ": ",
                  d.z.msg != nullptr ? d.z.msg : zError(ret));
      if (ret == Z_STREAM_END) {
        stream_done_ = true;
      } else if (produced > 0 || avail > d.z.avail_in) {
        stream_done_ = false;
      }
    } else {
      ZSTD_inBuffer in{in_.get() + in_begin_, avail, 0};
      ZSTD_outBuffer o{out, n, 0};
      const size_t ret = ZSTD_decompressStream(d.zstd, &o, &in);
      in_begin_ += in.pos;
      produced = o.pos;
      BRAID_CHECK(!ZSTD_isError(ret), "'", path_, "': corrupt zstd data near byte ",
                  file_bytes_read_ - static_cast<int64_t>(in_end_ - in_begin_), ": ",
                  ZSTD_getErrorName(ret));
      if (in.pos > 0 || produced > 0) stream_done_ = ret == 0;  // 0: a frame ended, all flushed
    }
    d.output_pending = produced == n;
    if (produced > 0) return produced;
  }
}

}  // namespace braid::data
