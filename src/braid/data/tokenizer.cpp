#include "braid/data/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "braid/core/error.h"
#include "braid/data/bpe_tokenizer.h"
#include "braid/data/hf_tokenizer.h"
#include "braid/data/sentencepiece_tokenizer.h"

namespace braid::data {

namespace fs = std::filesystem;

namespace {

// The length of the well-formed UTF-8 sequence at s[i], or 0 (Unicode Table 3-7); *consumed:
// the bytes of the maximal subpart to replace when it is ill-formed.
size_t utf8_sequence(std::string_view s, size_t i, size_t* consumed) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (c < 0x80) {
    *consumed = 1;
    return 1;
  } else if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    *consumed = 1;
    return 0;
  }
  size_t k = 1;
  for (; k < n && i + k < s.size(); ++k) {
    const unsigned char lower = k == 1 ? lo : 0x80, upper = k == 1 ? hi : 0xBF;
    if (b(i + k) < lower || b(i + k) > upper) break;
  }
  *consumed = k;
  return k == n ? n : 0;
}

}  // namespace

bool is_well_formed_utf8(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    if (static_cast<unsigned char>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t consumed = 0;
    if (utf8_sequence(bytes, i, &consumed) == 0) return false;
    i += consumed;
  }
  return true;
}

std::string replace_ill_formed_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    size_t consumed = 0;
    if (const size_t n = utf8_sequence(bytes, i, &consumed); n > 0) {
      out.append(bytes, i, n);
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
    }
    i += consumed;
  }
  return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) {
  std::vector<int32_t> out;
  encode(text, out);
  return out;
}

std::vector<int32_t> Tokenizer::encode_ordinary(std::string_view text) {
  std::vector<int32_t> out;
  encode_ordinary(text, out);
  return out;
}

std::string Tokenizer::decode_text(const std::vector<int32_t>& ids) const {
  return replace_ill_formed_utf8(decode(ids));
}

int32_t document_separator(const Tokenizer& tok) {
  if (tok.bos_id() >= 0) return tok.bos_id();
  if (int32_t eot = tok.special_token_id("<|endoftext|>"); eot >= 0) return eot;
  return tok.eos_id();
}

std::unique_ptr<Tokenizer> Tokenizer::from_path(const std::string& path) {
  const fs::path p(path);
  if (fs::is_regular_file(p)) {
    if (p.extension() == ".model") {
      return std::make_unique<SentencePieceTokenizer>(SentencePieceTokenizer::from_file(path));
    }
    return std::make_unique<HfTokenizer>(HfTokenizer::from_file(path));
  }
  BRAID_CHECK(fs::is_directory(p), "tokenizer: '", path, "' is neither a directory nor a file");
  // As transformers' AutoTokenizer: tokenizer.json first when both are there.
  if (fs::exists(p / "tokenizer.json")) {
    return std::make_unique<HfTokenizer>(HfTokenizer::from_file((p / "tokenizer.json").string()));
  }
  if (fs::exists(p / "tokenizer.model")) {
    return std::make_unique<SentencePieceTokenizer>(
        SentencePieceTokenizer::from_file((p / "tokenizer.model").string()));
  }
  if (fs::exists(p / "encoder.json") || fs::exists(p / "vocab.bpe")) {
    return std::make_unique<BpeTokenizer>(BpeTokenizer::from_dir(path));
  }
  BRAID_THROW("tokenizer: '", path,
              "' has neither tokenizer.json (Hugging Face), tokenizer.model (SentencePiece) nor "
              "encoder.json + vocab.bpe (GPT-2)");
}

std::string read_tokenizer_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  BRAID_CHECK(in.good(), "tokenizer: cannot open '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> export_tokenizer_files(const std::string& from, const std::string& to) {
  namespace fs = std::filesystem;
  static const std::pair<const char*, const char*> kFiles[] = {
      {"tokenizer.json", "tokenizer.json"},
      {"tokenizer_config.json", "tokenizer_config.json"},
      {"special_tokens_map.json", "special_tokens_map.json"},
      {"added_tokens.json", "added_tokens.json"},
      {"tokenizer.model", "tokenizer.model"},
      {"vocab.json", "vocab.json"},
      {"merges.txt", "merges.txt"},
      {"encoder.json", "vocab.json"},  // OpenAI's GPT-2 files are HF's, renamed
      {"vocab.bpe", "merges.txt"}};
  std::vector<std::string> written;
  for (const auto& [src, dst] : kFiles) {
    const fs::path in = fs::path(from) / src;
    if (!fs::is_regular_file(in) || std::find(written.begin(), written.end(), dst) != written.end())
      continue;
    const fs::path out = fs::path(to) / dst, tmp = fs::path(to) / (std::string(dst) + ".tmp");
    std::error_code ec;
    fs::copy_file(in, tmp, fs::copy_options::overwrite_existing, ec);
    BRAID_CHECK(!ec, "exporting the tokenizer: cannot copy '", in.string(), "' to '", tmp.string(),
                "': ", ec.message());
    fs::rename(tmp, out, ec);
    BRAID_CHECK(!ec, "exporting the tokenizer: cannot rename '", tmp.string(), "': ", ec.message());
    written.emplace_back(dst);
  }
  return written;
}

}  // namespace braid::data
