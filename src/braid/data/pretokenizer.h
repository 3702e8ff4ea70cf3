// Pretokenizer: splits UTF-8 text into the pieces GPT-2's BPE runs on, with OpenAI's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// through PCRE2 (UTF + UCP, JIT-compiled when the library supports it).
//
// The compiled pattern is immutable and shared between copies; each copy owns its own match
// data, so copies may run on different threads at once while one object may not.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace braid::data {

class Pretokenizer {
 public:
  // The GPT-2 pattern above.
  Pretokenizer();
  explicit Pretokenizer(const std::string& pattern);
  Pretokenizer(const Pretokenizer& o);
  Pretokenizer& operator=(const Pretokenizer& o);
  Pretokenizer(Pretokenizer&&) noexcept;
  Pretokenizer& operator=(Pretokenizer&&) noexcept;
  ~Pretokenizer();

  static const char* gpt2_pattern();

  // Calls fn(piece) for each successive non-overlapping match, as Python's re.findall does
  // (the GPT-2 pattern matches everywhere, so its pieces cover the text exactly). Throws
  // braid::Error naming the byte offset when text is not valid UTF-8.
  template <typename Fn>
  void split(std::string_view text, Fn&& fn) {
    size_t pos = 0;
    while (pos < text.size()) {
      auto [begin, end] = next_match(text, pos);
      if (begin == end) break;  // no further match
      fn(text.substr(begin, end - begin));
      pos = end;
    }
  }
  std::vector<std::string> split(std::string_view text);

  bool is_jit() const;

  // [begin, end) of the first match at or after pos; begin == end when there is none. Throws
  // as split() does, and when the pattern matches the empty string.
  std::pair<size_t, size_t> next_match(std::string_view text, size_t pos);

 private:
  struct Compiled;
  std::shared_ptr<const Compiled> compiled_;
  struct MatchData;
  std::unique_ptr<MatchData> match_;
};

}  // namespace braid::data
