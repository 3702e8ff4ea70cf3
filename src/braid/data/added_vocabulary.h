// AddedVocabulary: a tokenizer's added and special tokens ("<|begin_of_text|>", "<s>", chat
// markers) and how they are found in raw text, as HF's AddedVocabulary finds them: leftmost,
// longest first at a position, single_word, lstrip and rstrip honoured. The text between them
// goes through the tokenizer's own model. Shared by HfTokenizer (tokenizer.json's
// added_tokens) and SentencePieceTokenizer (tokenizer_config.json's added_tokens_decoder).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "braid/data/hf_tokenizer.h"

namespace braid::data {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false, lstrip = false, rstrip = false, single_word = false;
};

class AddedVocabulary {
 public:
  // A token whose content is already there replaces it (HF: the later entry wins).
  void add(AddedToken token);

  // The id of the token spelt `content`, or -1.
  int32_t id_of(std::string_view content) const;
  // The token with this id, or nullptr.
  const AddedToken* by_id(int32_t id) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  int32_t max_id() const;  // -1 when empty

  // Cuts text at the added tokens it holds: on_text(stretch, at_start) for each stretch between
  // them (empty ones too; at_start: it begins the text) and on_token(id) for each token, in
  // order. The spaces an lstrip/rstrip token takes are in no stretch.
  template <typename OnText, typename OnToken>
  void split(std::string_view text, OnText&& on_text, OnToken&& on_token) const {
    size_t seg = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      if (by_first_byte_[static_cast<unsigned char>(text[i])].empty()) continue;
      const AddedToken* hit = match_at(text, i);
      if (hit == nullptr) continue;
      size_t seg_end = i, next = i + hit->content.size();
      if (hit->lstrip) {
        while (seg_end > seg && is_ascii_space(text[seg_end - 1])) --seg_end;
      }
      if (hit->rstrip) {
        while (next < text.size() && is_ascii_space(text[next])) ++next;
      }
      on_text(text.substr(seg, seg_end - seg), seg == 0);
      on_token(hit->id);
      seg = next;
      i = next - 1;
    }
    on_text(text.substr(seg), seg == 0);
  }

 private:
  static bool is_ascii_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
  }
  // The longest token that matches text at i, or nullptr.
  const AddedToken* match_at(std::string_view text, size_t i) const;

  std::vector<AddedToken> tokens_;
  // Indices into tokens_ by the content's first byte, longest first (ties: first added first).
  std::array<std::vector<int32_t>, 256> by_first_byte_;
  HfStringMap<int32_t> ids_;                 // content -> id
  std::unordered_map<int32_t, int32_t> at_;  // id -> index into tokens_
};

}  // namespace braid::data
