#include "braid/data/bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "braid/core/error.h"
#include "braid/data/bpe_merges.h"
#include "braid/data/byte_unicode.h"
#include "braid/data/tokenizer.h"

namespace braid::data {

namespace {
constexpr size_t kMaxCacheEntries = 1 << 16;  // cleared when full; bounds memory on any corpus
constexpr const char* kEndOfText = "<|endoftext|>";

}  // namespace

struct BpeTokenizer::Model {
  std::vector<std::string> id_bytes;   // raw bytes of each token
  std::array<int32_t, 256> byte_id{};  // token of each single byte
  BpeMerges merges;
  int32_t eot = -1;
};

BpeTokenizer::BpeTokenizer(std::shared_ptr<const Model> model) : model_(std::move(model)) {}

BpeTokenizer BpeTokenizer::from_vocab(
    const std::unordered_map<std::string, int32_t>& vocab,
    const std::vector<std::pair<std::string, std::string>>& merges) {
  auto m = std::make_shared<Model>();
  const auto n = static_cast<int32_t>(vocab.size());
  BRAID_CHECK(n > 0, "tokenizer: empty vocabulary");
  m->id_bytes.resize(n);
  std::vector<bool> seen(n, false);
  std::unordered_map<std::string, int32_t> by_bytes;
  by_bytes.reserve(vocab.size());
  for (const auto& [spelling, id] : vocab) {
    BRAID_CHECK(id >= 0 && id < n, "tokenizer: token '", spelling, "' has id ", id, " outside [0, ",
                n, ") (ids must be dense from 0)");
    BRAID_CHECK(!seen[id], "tokenizer: id ", id, " is used by two tokens");
    seen[id] = true;
    if (spelling == kEndOfText) {
      m->eot = id;
      m->id_bytes[id] = spelling;
      continue;
    }
    std::string bytes = unicode_string_to_bytes(spelling);
    m->id_bytes[id] = bytes;
    by_bytes.emplace(std::move(bytes), id);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = by_bytes.find(std::string(1, static_cast<char>(b)));
    BRAID_CHECK(it != by_bytes.end(), "tokenizer: vocabulary has no token for byte ", b, " ('",
                byte_to_unicode(static_cast<unsigned char>(b)), "')");
    m->byte_id[b] = it->second;
  }
  m->merges.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto lookup = [&](const std::string& bytes, const std::string& what) {
      auto it = by_bytes.find(bytes);
      BRAID_CHECK(it != by_bytes.end(), "tokenizer: merge ", rank, " ('", a, " ", b, "'): ", what,
                  " '", bytes_to_unicode_string(bytes), "' is not in the vocabulary");
      return it->second;
    };
    std::string ab = unicode_string_to_bytes(a), bb = unicode_string_to_bytes(b);
    int32_t ia = lookup(ab, "left"), ib = lookup(bb, "right"), im = lookup(ab + bb, "result");
    m->merges.add(ia, ib, static_cast<int32_t>(rank), im);
  }
  return BpeTokenizer(std::move(m));
}

BpeTokenizer BpeTokenizer::from_files(const std::string& encoder_json,
                                      const std::string& vocab_bpe) {
  std::unordered_map<std::string, int32_t> vocab;
  {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_tokenizer_file(encoder_json));
    } catch (const nlohmann::json::exception& e) {
      BRAID_THROW("tokenizer: '", encoder_json, "' is not valid JSON: ", e.what());
    }
    BRAID_CHECK(j.is_object(), "tokenizer: '", encoder_json,
                "' must be a JSON object of token -> id");
    for (auto it = j.begin(); it != j.end(); ++it) {
      BRAID_CHECK(it.value().is_number_integer(), "tokenizer: '", encoder_json, "': token '",
                  it.key(), "' has a non-integer id");
      vocab.emplace(it.key(), it.value().get<int32_t>());
    }
  }
  std::vector<std::pair<std::string, std::string>> merges;
  {
    std::istringstream in(read_tokenizer_file(vocab_bpe));
    std::string line;
    int64_t line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
      std::istringstream fields(line);
      std::string a, b, extra;
      fields >> a >> b;
      BRAID_CHECK(!a.empty() && !b.empty() && !(fields >> extra), "tokenizer: '", vocab_bpe,
                  "' line ", line_no, ": expected two symbols, got '", line, "'");
      merges.emplace_back(std::move(a), std::move(b));
    }
  }
  try {
    return from_vocab(vocab, merges);
  } catch (const Error& e) {
    BRAID_THROW(e.what(), " (loading '", encoder_json, "' and '", vocab_bpe, "')");
  }
}

BpeTokenizer BpeTokenizer::from_dir(const std::string& dir) {
  return from_files(dir + "/encoder.json", dir + "/vocab.bpe");
}

int32_t BpeTokenizer::vocab_size() const {
  return static_cast<int32_t>(model_->id_bytes.size());
}
int32_t BpeTokenizer::eot_id() const {
  return model_->eot;
}

int32_t BpeTokenizer::special_token_id(std::string_view content) const {
  return content == kEndOfText ? model_->eot : -1;
}

std::string_view BpeTokenizer::token_bytes(int32_t id) const {
  BRAID_CHECK(id >= 0 && id < vocab_size(), "tokenizer: token id ", id, " outside [0, ",
              vocab_size(), ")");
  return model_->id_bytes[id];
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id);
  return out;
}

void BpeTokenizer::encode(std::string_view text, std::vector<int32_t>& out) {
  const int32_t eot = eot_id();
  const std::string_view special = kEndOfText;
  size_t at = 0;
  while (eot >= 0) {
    const size_t hit = text.find(special, at);
    if (hit == std::string_view::npos) break;
    encode_ordinary(text.substr(at, hit - at), out);
    out.push_back(eot);
    at = hit + special.size();
  }
  encode_ordinary(text.substr(at), out);
}

void BpeTokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& out) {
  if (text.empty()) return;
  pretokenizer_.split(text, [&](std::string_view piece) { encode_piece(piece, out); });
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) {
  if (piece.size() == 1) {
    out.push_back(model_->byte_id[static_cast<unsigned char>(piece[0])]);
    return;
  }
  auto it = cache_.find(std::string(piece));
  if (it == cache_.end()) {
    std::vector<int32_t> ids;
    merge(piece, ids);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    it = cache_.emplace(std::string(piece), std::move(ids)).first;
  }
  out.insert(out.end(), it->second.begin(), it->second.end());
}

void BpeTokenizer::merge(std::string_view piece, std::vector<int32_t>& ids) const {
  ids.resize(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) {
    ids[i] = model_->byte_id[static_cast<unsigned char>(piece[i])];
  }
  model_->merges.apply(ids);
}

}  // namespace braid::data
