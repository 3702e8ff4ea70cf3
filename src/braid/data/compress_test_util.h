// Test-only: gzip and zstd files written in the tests, through the libraries InputFile reads
// them with.
#pragma once

#include <zlib.h>
#include <zstd.h>

#include <stdexcept>
#include <string>

#include "braid/data/test_util.h"

namespace braid::data::testutil {

// A gzip member of text (level 6, as gzip's default).
inline std::string gzip_bytes(const std::string& text) {
  z_stream z{};
  if (deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw std::runtime_error("deflateInit2 failed");
  }
  std::string out(deflateBound(&z, static_cast<uLong>(text.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int ret = deflate(&z, Z_FINISH);
  out.resize(out.size() - z.avail_out);
  deflateEnd(&z);
  if (ret != Z_STREAM_END) throw std::runtime_error("deflate did not finish");
  return out;
}

// One zstd frame of text with a content checksum, as the zstd command line writes it.
inline std::string zstd_bytes(const std::string& text) {
  std::string out(ZSTD_compressBound(text.size()), '\0');
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  const size_t n = ZSTD_compress2(cctx, out.data(), out.size(), text.data(), text.size());
  ZSTD_freeCCtx(cctx);
  if (ZSTD_isError(n)) throw std::runtime_error(ZSTD_getErrorName(n));
  out.resize(n);
  return out;
}

inline void write_gz(const std::string& path, const std::string& text) {
  write(path, gzip_bytes(text));
}
inline void write_zst(const std::string& path, const std::string& text) {
  write(path, zstd_bytes(text));
}

}  // namespace braid::data::testutil
