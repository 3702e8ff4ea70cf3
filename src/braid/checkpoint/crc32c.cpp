#include "braid/checkpoint/crc32c.h"

#include <array>
#include <cstdio>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>
#endif

namespace braid::checkpoint {

namespace {

constexpr uint32_t kPoly = 0x82f63b78u;  // reflected Castagnoli polynomial

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

uint32_t crc_table(uint32_t crc, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) crc = kTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

// crc of `len` zero bytes appended to a stream whose crc register is `crc` (no pre/post
// inversion), by the GF(2) matrix method: shifts the register by len bytes.
uint32_t gf2_times(const std::array<uint32_t, 32>& m, uint32_t v) {
  uint32_t r = 0;
  for (int i = 0; v; ++i, v >>= 1)
    if (v & 1) r ^= m[static_cast<size_t>(i)];
  return r;
}
std::array<uint32_t, 32> gf2_square(const std::array<uint32_t, 32>& m) {
  std::array<uint32_t, 32> r{};
  for (size_t i = 0; i < 32; ++i) r[i] = gf2_times(m, m[i]);
  return r;
}
// The operator that advances the register over `len` zero bytes.
std::array<uint32_t, 32> zeros_operator(size_t len) {
  std::array<uint32_t, 32> op{};  // one zero bit
  op[0] = kPoly;
  for (size_t i = 1; i < 32; ++i) op[i] = 1u << (i - 1);
  std::array<uint32_t, 32> result{};
  for (size_t i = 0; i < 32; ++i) result[i] = 1u << i;  // identity
  op = gf2_square(gf2_square(gf2_square(op)));          // one zero byte
  while (len) {
    if (len & 1) {
      std::array<uint32_t, 32> next{};
      for (size_t i = 0; i < 32; ++i) next[i] = gf2_times(op, result[i]);
      result = next;
    }
    len >>= 1;
    if (len) op = gf2_square(op);
  }
  return result;
}

#if defined(__x86_64__)
bool has_sse42() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSE4_2);
}

// Three independent streams hide the instruction's 3-cycle latency; they are combined by
// shifting the first two over the bytes that follow them.
constexpr size_t kBlock = 8192;  // bytes per stream per round

__attribute__((target("sse4.2"))) uint32_t crc_hw(uint32_t crc, const uint8_t* p, size_t n) {
  static const std::array<uint32_t, 32> shift = zeros_operator(kBlock);
  while (n >= 3 * kBlock) {
    uint64_t c0 = crc, c1 = 0, c2 = 0;
    for (size_t i = 0; i < kBlock; i += 8) {
      uint64_t a, b, c;
      std::memcpy(&a, p + i, 8);
      std::memcpy(&b, p + kBlock + i, 8);
      std::memcpy(&c, p + 2 * kBlock + i, 8);
      c0 = _mm_crc32_u64(c0, a);
      c1 = _mm_crc32_u64(c1, b);
      c2 = _mm_crc32_u64(c2, c);
    }
    uint32_t r = gf2_times(shift, static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c1);
    crc = gf2_times(shift, r) ^ static_cast<uint32_t>(c2);
    p += 3 * kBlock;
    n -= 3 * kBlock;
  }
  uint64_t c = crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
  }
  crc = static_cast<uint32_t>(c);
  for (; n > 0; ++p, --n) crc = _mm_crc32_u8(crc, *p);
  return crc;
}
#endif

}  // namespace

uint32_t crc32c(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  static const bool hw = has_sse42();
  if (hw) return ~crc_hw(crc, p, n);
#endif
  return ~crc_table(crc, p, n);
}

std::string format_crc32c(uint32_t crc) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "crc32c:%08x", crc);
  return buf;
}

}  // namespace braid::checkpoint
