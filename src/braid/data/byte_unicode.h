// GPT-2's reversible map between raw bytes and printable unicode characters (OpenAI's
// bytes_to_unicode): encoder.json and vocab.bpe spell every token's bytes through it, e.g. the
// space byte 0x20 is "Ġ" (U+0120). BpeTokenizer works on raw bytes and converts once on load.
#pragma once

#include <string>
#include <string_view>

namespace braid::data {

// UTF-8 of the printable character that stands for byte b.
std::string byte_to_unicode(unsigned char b);
// Raw bytes -> their printable spelling ("hi there" -> "hiĠthere").
std::string bytes_to_unicode_string(std::string_view bytes);
// The inverse; throws braid::Error naming the character offset of any character outside the
// 256 the map uses (so malformed vocabulary files fail on load, not during training).
std::string unicode_string_to_bytes(std::string_view text);

}  // namespace braid::data
