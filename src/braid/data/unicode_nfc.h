// Unicode NFC (canonical composition) of UTF-8 text, through ICU: the normalizer of Qwen2/3's
// and GPT-NeoX's tokenizer.json.
#pragma once

#include <string>
#include <string_view>

namespace braid::data {

// Whether text (well-formed UTF-8) is already NFC; a fast scan for ASCII text.
bool is_nfc(std::string_view text);
std::string nfc(std::string_view text);

}  // namespace braid::data
