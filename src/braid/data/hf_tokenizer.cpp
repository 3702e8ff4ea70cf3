// HfTokenizer: encoding and decoding (loading is hf_tokenizer_load.cpp).
#include "braid/data/hf_tokenizer.h"

#include "braid/core/error.h"
#include "braid/data/hf_tokenizer_model.h"
#include "braid/data/unicode_nfc.h"

namespace braid::data {

namespace {
constexpr size_t kMaxCacheEntries = 1 << 16;  // cleared when full; bounds memory on any corpus

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty() || s.find(from) == std::string::npos) return;
  std::string out;
  out.reserve(s.size());
  size_t at = 0;
  for (size_t hit; (hit = s.find(from, at)) != std::string::npos; at = hit + from.size()) {
    out.append(s, at, hit - at);
    out += to;
  }
  out.append(s, at);
  s = std::move(out);
}

// Calls piece(begin, end) for the pieces a Split with this behaviour makes of [0, n), given
// its matches in order through each_match(on_match).
template <typename EachMatch, typename Piece>
void split_pieces(size_t n, const HfPreTokenizer& p, EachMatch&& each_match, Piece&& piece) {
  size_t last = 0;
  auto emit = [&](size_t b, size_t e) {
    if (e > b) piece(b, e);
  };
  each_match([&](size_t b, size_t e) {
    switch (p.behavior) {
      case HfPreTokenizer::kIsolated:
        emit(last, b);
        emit(b, e);
        last = e;
        break;
      case HfPreTokenizer::kRemoved:
        if (p.invert) {
          emit(b, e);
        } else {
          emit(last, b);
        }
        last = e;
        break;
      case HfPreTokenizer::kMergedWithPrevious:
        emit(last, e);
        last = e;
        break;
      case HfPreTokenizer::kMergedWithNext:
        emit(last, b);
        last = b;
        break;
    }
  });
  if (!(p.behavior == HfPreTokenizer::kRemoved && p.invert)) emit(last, n);
}

// "<0xNN>" -> NN, or -1.
int byte_token_value(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (char c : t.substr(3, 2)) {
    v *= 16;
    if (c >= '0' && c <= '9') {
      v += c - '0';
    } else if (c >= 'A' && c <= 'F') {
      v += c - 'A' + 10;
    } else {
      return -1;
    }
  }
  return v;
}
}  // namespace

HfTokenizer::HfTokenizer(std::shared_ptr<const Model> model) : model_(std::move(model)) {
  for (const auto& pattern : model_->regex_patterns) regexes_.emplace_back(pattern);
}

int32_t HfTokenizer::vocab_size() const {
  return static_cast<int32_t>(model_->token_text.size());
}
int32_t HfTokenizer::bos_id() const {
  return model_->bos;
}
int32_t HfTokenizer::eos_id() const {
  return model_->eos;
}
int32_t HfTokenizer::special_token_id(std::string_view content) const {
  return model_->added.id_of(content);
}

void HfTokenizer::encode(std::string_view text, std::vector<int32_t>& out) {
  const Model& m = *model_;
  std::string fixed;
  if (!is_well_formed_utf8(text)) text = fixed = replace_ill_formed_utf8(text);
  out.insert(out.end(), m.prefix.begin(), m.prefix.end());
  m.added.split(
      text, [&](std::string_view seg, bool at_start) { encode_segment(seg, at_start, out); },
      [&](int32_t id) { out.push_back(id); });
  out.insert(out.end(), m.suffix.begin(), m.suffix.end());
}

void HfTokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& out) {
  std::string fixed;
  if (!is_well_formed_utf8(text)) text = fixed = replace_ill_formed_utf8(text);
  encode_segment(text, true, out);
}

void HfTokenizer::encode_segment(std::string_view text, bool at_start, std::vector<int32_t>& out) {
  if (text.empty()) return;
  std::string normalized;
  bool owned = false;
  for (const HfNormalizer& n : model_->normalizers) {
    switch (n.kind) {
      case HfNormalizer::kNfc:
        if (!is_nfc(owned ? std::string_view(normalized) : text)) {
          normalized = nfc(owned ? std::string_view(normalized) : text);
          owned = true;
        }
        break;
      case HfNormalizer::kPrepend:
        if (!owned) normalized.assign(text), owned = true;
        if (!normalized.empty()) normalized.insert(0, n.a);
        break;
      case HfNormalizer::kReplace:
        if (!owned) normalized.assign(text), owned = true;
        replace_all(normalized, n.a, n.b);
        break;
    }
  }
  if (owned) text = normalized;
  auto emit = [&](std::string_view piece) { encode_piece(piece, out); };
  pre_tokenize(0, text, at_start, emit);
}

template <typename Fn>
void HfTokenizer::pre_tokenize(size_t step, std::string_view text, bool at_start, Fn& emit) {
  if (text.empty()) return;
  if (step == model_->pre_tokenizers.size()) {
    emit(text);
    return;
  }
  const HfPreTokenizer& p = model_->pre_tokenizers[step];
  auto sub = [&](size_t b, size_t e) {
    pre_tokenize(step + 1, text.substr(b, e - b), at_start && b == 0, emit);
  };
  switch (p.kind) {
    case HfPreTokenizer::kByteLevel: {
      std::string spaced;
      if (p.add_prefix_space && text[0] != ' ') text = spaced = " " + std::string(text);
      if (p.regex < 0) {
        pre_tokenize(step + 1, text, at_start, emit);
        return;
      }
      // GPT-2's pattern matches everywhere: its matches are the pieces.
      const char* base = text.data();
      regexes_[p.regex].split(text, [&](std::string_view piece) {
        sub(static_cast<size_t>(piece.data() - base),
            static_cast<size_t>(piece.data() - base) + piece.size());
      });
      return;
    }
    case HfPreTokenizer::kSplitRegex: {
      Pretokenizer& re = regexes_[p.regex];
      split_pieces(
          text.size(), p,
          [&](auto&& on_match) {
            for (size_t pos = 0; pos < text.size();) {
              auto [b, e] = re.next_match(text, pos);
              if (b == e) break;
              on_match(b, e);
              pos = e;
            }
          },
          sub);
      return;
    }
    case HfPreTokenizer::kSplitString: {
      split_pieces(
          text.size(), p,
          [&](auto&& on_match) {
            if (p.literal.empty()) return;
            for (size_t at = 0; (at = text.find(p.literal, at)) != std::string_view::npos;
                 at += p.literal.size()) {
              on_match(at, at + p.literal.size());
            }
          },
          sub);
      return;
    }
    case HfPreTokenizer::kDigits: {
      // HF's Digits: ASCII digits isolated, one by one or in runs.
      auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
      size_t last = 0;
      for (size_t i = 0; i < text.size();) {
        if (!is_digit(text[i])) {
          ++i;
          continue;
        }
        size_t j = i + 1;
        while (!p.individual_digits && j < text.size() && is_digit(text[j])) ++j;
        if (i > last) sub(last, i);
        sub(i, j);
        last = i = j;
      }
      if (last < text.size()) sub(last, text.size());
      return;
    }
    case HfPreTokenizer::kMetaspace: {
      std::string s(text);
      replace_all(s, " ", p.literal);
      if (p.add_prefix_space && (!p.prepend_first_only || at_start) && s.rfind(p.literal, 0) != 0) {
        s.insert(0, p.literal);
      }
      if (!p.split) {
        pre_tokenize(step + 1, s, at_start, emit);
        return;
      }
      // Each replacement character starts a piece (MergedWithNext).
      const std::string_view v = s;
      size_t last = 0;
      for (size_t at = v.find(p.literal, 1); at != std::string_view::npos;
           at = v.find(p.literal, at + p.literal.size())) {
        pre_tokenize(step + 1, v.substr(last, at - last), at_start && last == 0, emit);
        last = at;
      }
      pre_tokenize(step + 1, v.substr(last), at_start && last == 0, emit);
      return;
    }
  }
}

void HfTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) {
  if (model_->byte_level && piece.size() == 1) {
    out.push_back(model_->byte_id[static_cast<unsigned char>(piece[0])]);
    return;
  }
  auto it = cache_.find(piece);
  if (it == cache_.end()) {
    std::vector<int32_t> ids;
    model_piece(piece, ids);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    it = cache_.emplace(std::string(piece), std::move(ids)).first;
  }
  out.insert(out.end(), it->second.begin(), it->second.end());
}

void HfTokenizer::model_piece(std::string_view piece, std::vector<int32_t>& ids) const {
  const Model& m = *model_;
  if (m.ignore_merges) {
    if (auto it = m.vocab.find(piece); it != m.vocab.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  if (m.byte_level) {
    for (char c : piece) ids.push_back(m.byte_id[static_cast<unsigned char>(c)]);
  } else {
    // One symbol per character: its token, else its bytes' <0xNN> tokens, else unk.
    for (size_t i = 0; i < piece.size();) {
      const auto lead = static_cast<unsigned char>(piece[i]);
      const size_t len = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
      const std::string_view ch = piece.substr(i, len);
      i += len;
      if (auto it = m.vocab.find(ch); it != m.vocab.end()) {
        ids.push_back(it->second);
        continue;
      }
      bool all_bytes = m.byte_fallback;
      for (char c : ch) all_bytes = all_bytes && m.fallback_id[static_cast<unsigned char>(c)] >= 0;
      if (all_bytes) {
        for (char c : ch) ids.push_back(m.fallback_id[static_cast<unsigned char>(c)]);
        continue;
      }
      BRAID_CHECK(m.unk >= 0, "tokenizer '", m.where, "': character '", std::string(ch),
                  "' has no token, no byte fallback and the model has no unk_token");
      if (!(m.fuse_unk && !ids.empty() && ids.back() == m.unk)) ids.push_back(m.unk);
    }
  }
  m.merges.apply(ids);
}

std::string HfTokenizer::decode(const std::vector<int32_t>& ids) const {
  const Model& m = *model_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    BRAID_CHECK(id >= 0 && id < vocab_size(), "tokenizer: token id ", id, " outside [0, ",
                vocab_size(), ")");
    tokens.push_back(m.token_text[id]);
  }
  for (const HfDecoder& d : m.decoders) {
    switch (d.kind) {
      case HfDecoder::kByteLevel:  // token_text already holds the bytes
        break;
      case HfDecoder::kReplace:
        for (auto& t : tokens) replace_all(t, d.a, d.b);
        break;
      case HfDecoder::kByteFallback: {
        // As HF: a run of <0xNN> tokens becomes its bytes when they are valid UTF-8, else one
        // U+FFFD per byte.
        std::vector<std::string> out;
        std::string run;
        size_t run_len = 0;
        auto flush = [&] {
          if (run_len == 0) return;
          if (is_well_formed_utf8(run)) {
            out.push_back(run);
          } else {
            for (size_t k = 0; k < run_len; ++k) out.emplace_back("\xEF\xBF\xBD");
          }
          run.clear();
          run_len = 0;
        };
        for (auto& t : tokens) {
          if (const int v = byte_token_value(t); v >= 0) {
            run += static_cast<char>(v);
            ++run_len;
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        tokens = std::move(out);
        break;
      }
      case HfDecoder::kFuse: {
        std::string all;
        for (const auto& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case HfDecoder::kStrip:
        for (auto& t : tokens) {
          int a = 0, b = 0;
          while (a < d.start && t.compare(a * d.a.size(), d.a.size(), d.a) == 0) ++a;
          size_t cut = a * d.a.size();
          while (b < d.stop && t.size() >= cut + (b + 1) * d.a.size() &&
                 t.compare(t.size() - (b + 1) * d.a.size(), d.a.size(), d.a) == 0) {
            ++b;
          }
          t = t.substr(cut, t.size() - cut - b * d.a.size());
        }
        break;
      case HfDecoder::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          replace_all(tokens[i], d.a, " ");
          if (i == 0 && d.add_prefix_space && !tokens[i].empty() && tokens[i][0] == ' ') {
            tokens[i].erase(0, 1);
          }
        }
        break;
    }
  }
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

}  // namespace braid::data
