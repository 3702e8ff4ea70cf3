#include "braid/data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>

#include "braid/core/error.h"
#include "braid/data/added_vocabulary.h"
#include "braid/data/tokenizer_config.h"

namespace braid::data {

namespace {
constexpr std::string_view kSpace = "\xE2\x96\x81";  // "▁", sentencepiece's space

// ModelProto { normalizer_spec (3) { add_dummy_prefix (3) = false } }: appended to a serialized
// model, protobuf merges it into the model's normalizer_spec (the last scalar wins), which is
// how transformers' LlamaTokenizer(legacy=False) turns the dummy prefix off.
constexpr std::string_view kNoDummyPrefix{"\x1A\x02\x18\x00", 4};

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size()) {
    s.replace(at, from.size(), to);
  }
}

// "<0xNN>" -> NN, or -1.
int byte_piece_value(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (char c : t.substr(3, 2)) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}
}  // namespace

struct SentencePieceTokenizer::Model {
  std::string where;  // the model file, for errors
  sentencepiece::SentencePieceProcessor sp;
  bool legacy = true;
  bool add_prefix_space = true;      // legacy false: "▁" before the text
  bool strip_leading_space = false;  // decode: the model puts a "▁" before the text
  int32_t space_id = -1;             // "▁"
  int32_t pieces = 0;                // sentencepiece's vocabulary size
  AddedVocabulary added;
  std::vector<int32_t> prefix, suffix;  // bos/eos around an encoded text
  int32_t bos = -1, eos = -1;
  // By id, what decode writes: a piece with "▁" as a space, or the added token's content;
  // byte: the byte of a <0xNN> piece, else -1.
  std::vector<std::string> text;
  std::vector<int16_t> byte;
};

SentencePieceTokenizer::SentencePieceTokenizer(std::shared_ptr<const Model> model)
    : model_(std::move(model)) {}

std::unique_ptr<Tokenizer> SentencePieceTokenizer::clone() const {
  return std::unique_ptr<Tokenizer>(new SentencePieceTokenizer(*this));
}

SentencePieceTokenizer SentencePieceTokenizer::from_file(const std::string& path) {
  return from_model(read_tokenizer_file(path), tokenizer_config_beside(path), path);
}

SentencePieceTokenizer SentencePieceTokenizer::from_model(const std::string& model_bytes,
                                                          const std::string& config_json,
                                                          const std::string& where) {
  const TokenizerConfig c = TokenizerConfig::parse(config_json, where + " (tokenizer_config)");
  BRAID_CHECK(c.tokenizer_class.empty() || c.tokenizer_class == "LlamaTokenizer" ||
                  c.tokenizer_class == "LlamaTokenizerFast",
              "tokenizer '", where, "': tokenizer_class '", c.tokenizer_class,
              "' is not supported with a SentencePiece model (braid reads LlamaTokenizer's: "
              "LLaMA-1/2, TinyLlama, Mistral; or give the model's tokenizer.json)");
  auto m = std::make_shared<Model>();
  m->where = where;
  m->legacy = c.legacy.value_or(true);
  m->add_prefix_space = c.add_prefix_space.value_or(true);
  sentencepiece::SentencePieceProcessor& sp = m->sp;
  const auto status = sp.LoadFromSerializedProto(
      m->legacy ? model_bytes : model_bytes + std::string(kNoDummyPrefix));
  BRAID_CHECK(status.ok(), "tokenizer: '", where,
              "' is not a SentencePiece model (libsentencepiece: ", status.ToString(), ")");
  m->pieces = sp.GetPieceSize();
  if (m->legacy) {
    std::vector<std::string> probe;
    BRAID_CHECK(sp.Encode("a", &probe).ok(), "tokenizer '", where, "': cannot encode 'a'");
    m->strip_leading_space = !probe.empty() && probe[0].rfind(kSpace, 0) == 0;
  } else {
    m->strip_leading_space = m->add_prefix_space;
  }
  if (const int id = sp.PieceToId(kSpace); sp.IdToPiece(id) == kSpace) m->space_id = id;

  // The id of a special token named in the config: an added token's, else the model's piece.
  auto id_of = [&](const std::string& content, const char* what) {
    if (int32_t id = m->added.id_of(content); id >= 0) return id;
    const int id = sp.PieceToId(content);
    BRAID_CHECK(sp.IdToPiece(id) == content, "tokenizer '", where, "': ", what, " '", content,
                "' is not a token");
    return static_cast<int32_t>(id);
  };
  for (const AddedToken& a : c.added_tokens) m->added.add(a);
  if (c.present) {
    std::vector<std::pair<std::string, const char*>> named = {{c.bos_token, "bos_token"},
                                                              {c.eos_token, "eos_token"},
                                                              {c.unk_token, "unk_token"},
                                                              {c.pad_token, "pad_token"}};
    for (const auto& s : c.additional_special_tokens) named.emplace_back(s, "special token");
    for (const auto& [content, what] : named) {
      if (content.empty() || m->added.id_of(content) >= 0) continue;
      AddedToken a;
      a.content = content;
      a.id = id_of(content, what);
      a.special = true;
      m->added.add(std::move(a));
    }
  } else {
    // As LlamaTokenizer's defaults: the model's unknown and control pieces (<unk>, <s>, </s>).
    for (int id = 0; id < m->pieces; ++id) {
      if (!sp.IsControl(id) && !sp.IsUnknown(id)) continue;
      AddedToken a;
      a.content = sp.IdToPiece(id);
      a.id = id;
      a.special = true;
      if (!a.content.empty()) m->added.add(std::move(a));
    }
  }
  m->bos = !c.bos_token.empty() ? id_of(c.bos_token, "bos_token") : sp.bos_id();
  m->eos = !c.eos_token.empty() ? id_of(c.eos_token, "eos_token") : sp.eos_id();
  if (c.add_bos_token.value_or(m->bos >= 0)) {
    BRAID_CHECK(m->bos >= 0, "tokenizer '", where, "': add_bos_token is set but no bos_token");
    m->prefix.push_back(m->bos);
  }
  if (c.add_eos_token.value_or(false)) {
    BRAID_CHECK(m->eos >= 0, "tokenizer '", where, "': add_eos_token is set but no eos_token");
    m->suffix.push_back(m->eos);
  }

  const int32_t size = std::max(m->pieces, m->added.max_id() + 1);
  m->text.resize(size);
  m->byte.assign(size, -1);
  for (int32_t id = 0; id < size; ++id) {
    if (const AddedToken* a = m->added.by_id(id)) {
      m->text[id] = a->content;
    } else if (id < m->pieces) {
      const std::string& piece = sp.IdToPiece(id);
      if (sp.IsByte(id)) m->byte[id] = static_cast<int16_t>(byte_piece_value(piece));
      m->text[id] = piece;
      if (!sp.IsControl(id) && !sp.IsUnknown(id)) replace_all(m->text[id], kSpace, " ");
    }
  }
  return SentencePieceTokenizer(std::move(m));
}

int32_t SentencePieceTokenizer::vocab_size() const {
  return static_cast<int32_t>(model_->text.size());
}
int32_t SentencePieceTokenizer::bos_id() const {
  return model_->bos;
}
int32_t SentencePieceTokenizer::eos_id() const {
  return model_->eos;
}
int32_t SentencePieceTokenizer::special_token_id(std::string_view content) const {
  return model_->added.id_of(content);
}

void SentencePieceTokenizer::encode_stretch(std::string_view text,
                                            std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::vector<int> ids;
  const auto status = model_->sp.Encode(text, &ids);
  BRAID_CHECK(status.ok(), "tokenizer '", model_->where, "': ", status.ToString());
  out.insert(out.end(), ids.begin(), ids.end());
}

void SentencePieceTokenizer::encode(std::string_view text, std::vector<int32_t>& out) {
  const Model& m = *model_;
  std::string fixed;
  if (!is_well_formed_utf8(text)) text = fixed = replace_ill_formed_utf8(text);
  out.insert(out.end(), m.prefix.begin(), m.prefix.end());
  const size_t start = out.size();
  if (!m.legacy && !text.empty()) {
    // LlamaTokenizer(legacy=False).tokenize: "▁" in the text read as spaces, one "▁" before it.
    fixed = std::string(text);
    replace_all(fixed, kSpace, " ");
    if (m.add_prefix_space) fixed.insert(0, kSpace);
    text = fixed;
  }
  m.added.split(
      text, [&](std::string_view stretch, bool) { encode_stretch(stretch, out); },
      [&](int32_t id) { out.push_back(id); });
  if (!m.legacy && out.size() - start > 1 && out[start] == m.space_id) {
    // "▁" then a special token: the "▁" is dropped.
    if (const AddedToken* a = m.added.by_id(out[start + 1]); a != nullptr && a->special) {
      out.erase(out.begin() + static_cast<std::ptrdiff_t>(start));
    }
  }
  out.insert(out.end(), m.suffix.begin(), m.suffix.end());
}

void SentencePieceTokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& out) {
  std::string fixed;
  if (!is_well_formed_utf8(text)) text = fixed = replace_ill_formed_utf8(text);
  if (!model_->legacy && !text.empty()) {
    fixed = std::string(text);
    replace_all(fixed, kSpace, " ");
    if (model_->add_prefix_space) fixed.insert(0, kSpace);
    text = fixed;
  }
  encode_stretch(text, out);
}

std::string SentencePieceTokenizer::decode(const std::vector<int32_t>& ids) const {
  const Model& m = *model_;
  std::string out, run;
  size_t run_len = 0;
  auto flush = [&] {
    if (run_len == 0) return;
    if (is_well_formed_utf8(run)) {
      out += run;
    } else {
      for (size_t k = 0; k < run_len; ++k) out += "\xEF\xBF\xBD";
    }
    run.clear();
    run_len = 0;
  };
  for (int32_t id : ids) {
    BRAID_CHECK(id >= 0 && id < vocab_size(), "tokenizer: token id ", id, " outside [0, ",
                vocab_size(), ")");
    if (m.byte[id] >= 0) {
      run += static_cast<char>(m.byte[id]);
      ++run_len;
    } else {
      flush();
      out += m.text[id];
    }
  }
  flush();
  if (m.strip_leading_space && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

}  // namespace braid::data
