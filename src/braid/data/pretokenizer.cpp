#include "braid/data/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "braid/core/error.h"

namespace braid::data {

namespace {
std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}
}  // namespace

struct Pretokenizer::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  std::string pattern;
  ~Compiled() { pcre2_code_free(code); }
};

struct Pretokenizer::MatchData {
  pcre2_match_data* md = nullptr;
  explicit MatchData(const pcre2_code* code) {
    md = pcre2_match_data_create_from_pattern(code, nullptr);
    BRAID_CHECK(md != nullptr, "pretokenizer: out of memory creating PCRE2 match data");
  }
  ~MatchData() { pcre2_match_data_free(md); }
};

const char* Pretokenizer::gpt2_pattern() {
  return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
}

Pretokenizer::Pretokenizer() : Pretokenizer(gpt2_pattern()) {}

Pretokenizer::Pretokenizer(const std::string& pattern) {
  auto c = std::make_shared<Compiled>();
  c->pattern = pattern;
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  BRAID_CHECK(c->code != nullptr, "pretokenizer: pattern does not compile at offset ", err_offset,
              ": ", pcre2_message(err));
  // JIT is an optimisation: where the library lacks it, the interpreter gives the same matches.
  c->jit = pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE) == 0;
  compiled_ = std::move(c);
  match_ = std::make_unique<MatchData>(compiled_->code);
}

Pretokenizer::Pretokenizer(const Pretokenizer& o)
    : compiled_(o.compiled_), match_(std::make_unique<MatchData>(o.compiled_->code)) {}

Pretokenizer& Pretokenizer::operator=(const Pretokenizer& o) {
  if (this != &o) {
    compiled_ = o.compiled_;
    match_ = std::make_unique<MatchData>(compiled_->code);
  }
  return *this;
}

Pretokenizer::Pretokenizer(Pretokenizer&&) noexcept = default;
Pretokenizer& Pretokenizer::operator=(Pretokenizer&&) noexcept = default;
Pretokenizer::~Pretokenizer() = default;

bool Pretokenizer::is_jit() const {
  return compiled_->jit;
}

std::pair<size_t, size_t> Pretokenizer::next_match(std::string_view text, size_t pos) {
  // The UTF check runs once, over the whole text, on the first call (pos 0); later calls start
  // at match ends, which are character boundaries. pcre2_match uses the JIT code when there is
  // some, after that check (pcre2_jit_match would skip it).
  uint32_t opts = pos == 0 ? 0u : PCRE2_NO_UTF_CHECK;
  int rc = pcre2_match(compiled_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos,
                       opts, match_->md, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return {pos, pos};
  if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21) {
    BRAID_THROW("text is not valid UTF-8 at byte offset ", pcre2_get_startchar(match_->md), ": ",
                pcre2_message(rc));
  }
  BRAID_CHECK(rc > 0, "pretokenizer: matching failed at byte offset ", pos, " of ", text.size(),
              ": ", pcre2_message(rc));
  PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match_->md);
  BRAID_CHECK(ov[1] > ov[0], "pretokenizer: pattern '", compiled_->pattern,
              "' matched the empty string at byte offset ", ov[0]);
  return {ov[0], ov[1]};
}

std::vector<std::string> Pretokenizer::split(std::string_view text) {
  std::vector<std::string> out;
  split(text, [&](std::string_view piece) { out.emplace_back(piece); });
  return out;
}

}  // namespace braid::data
