#include "braid/data/added_vocabulary.h"

#include <algorithm>

#include "braid/core/error.h"

namespace braid::data {

namespace {
bool is_word_byte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         c == '_';
}
}  // namespace

void AddedVocabulary::add(AddedToken token) {
  BRAID_CHECK(!token.content.empty(), "added token with id ", token.id, " has no content");
  auto& bucket = by_first_byte_[static_cast<unsigned char>(token.content[0])];
  if (auto it = ids_.find(token.content); it != ids_.end()) {
    for (int32_t k : bucket) {
      if (tokens_[k].content != token.content) continue;
      at_.erase(tokens_[k].id);
      at_[token.id] = k;
      tokens_[k] = token;
    }
    it->second = token.id;
    return;
  }
  const auto index = static_cast<int32_t>(tokens_.size());
  ids_.emplace(token.content, token.id);
  at_[token.id] = index;
  const size_t len = token.content.size();
  tokens_.push_back(std::move(token));
  // After every token at least as long: longest first, ties in the order added.
  auto at = std::find_if(bucket.begin(), bucket.end(),
                         [&](int32_t k) { return tokens_[k].content.size() < len; });
  bucket.insert(at, index);
}

int32_t AddedVocabulary::id_of(std::string_view content) const {
  auto it = ids_.find(content);
  return it == ids_.end() ? -1 : it->second;
}

const AddedToken* AddedVocabulary::by_id(int32_t id) const {
  auto it = at_.find(id);
  return it == at_.end() ? nullptr : &tokens_[it->second];
}

int32_t AddedVocabulary::max_id() const {
  int32_t m = -1;
  for (const AddedToken& t : tokens_) m = std::max(m, t.id);
  return m;
}

const AddedToken* AddedVocabulary::match_at(std::string_view text, size_t i) const {
  for (int32_t k : by_first_byte_[static_cast<unsigned char>(text[i])]) {
    const AddedToken& a = tokens_[k];
    if (text.compare(i, a.content.size(), a.content) != 0) continue;
    const size_t end = i + a.content.size();
    if (a.single_word &&
        ((i > 0 && is_word_byte(text[i - 1])) || (end < text.size() && is_word_byte(text[end])))) {
      continue;
    }
    return &a;
  }
  return nullptr;
}

}  // namespace braid::data
