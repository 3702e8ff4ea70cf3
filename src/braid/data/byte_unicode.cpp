#include "braid/data/byte_unicode.h"

#include <array>

#include "braid/core/error.h"

namespace braid::data {

namespace {

// Code point standing for each byte: printable Latin-1 bytes stand for themselves, the other 68
// map, in byte order, to U+0100 onwards.
std::array<uint32_t, 256> byte_code_points() {
  std::array<uint32_t, 256> cp{};
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  uint32_t n = 0;
  for (int b = 0; b < 256; ++b) cp[b] = printable(b) ? static_cast<uint32_t>(b) : 256 + n++;
  return cp;
}

void append_utf8(std::string& out, uint32_t cp) {
  // Only code points below U+0800 occur here.
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

std::string byte_to_unicode(unsigned char b) {
  std::string out;
  append_utf8(out, byte_code_points()[b]);
  return out;
}

std::string bytes_to_unicode_string(std::string_view bytes) {
  const auto cp = byte_code_points();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(out, cp[static_cast<unsigned char>(c)]);
  return out;
}

std::string unicode_string_to_bytes(std::string_view text) {
  // Inverse table over code points 0..323 (the largest is 256 + 67).
  std::array<int, 324> inverse;
  inverse.fill(-1);
  const auto cp = byte_code_points();
  for (int b = 0; b < 256; ++b) inverse[cp[b]] = b;

  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    auto c0 = static_cast<unsigned char>(text[i]);
    uint32_t code = 0;
    size_t len = 1;
    if (c0 < 0x80) {
      code = c0;
    } else if ((c0 & 0xE0) == 0xC0 && i + 1 < text.size()) {
      code = ((c0 & 0x1Fu) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3Fu);
      len = 2;
    } else {
      code = 0xFFFFFFFF;
    }
    BRAID_CHECK(code < inverse.size() && inverse[code] >= 0, "byte-level token '", text,
                "': character at byte offset ", i, " is not one of GPT-2's 256 byte symbols");
    out.push_back(static_cast<char>(inverse[code]));
    i += len;
  }
  return out;
}

}  // namespace braid::data
