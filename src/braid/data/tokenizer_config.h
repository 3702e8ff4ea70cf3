// TokenizerConfig: the keys of a Hugging Face tokenizer_config.json that braid reads, as
// transformers reads them, whichever tokenizer file sits beside it (tokenizer.json or a
// SentencePiece tokenizer.model). Absent keys stay unset; the tokenizer decides the default.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "braid/data/added_vocabulary.h"

namespace braid::data {

struct TokenizerConfig {
  bool present = false;         // the file exists
  std::string tokenizer_class;  // "LlamaTokenizer", ...; "" when absent
  // bos_token etc.: a string or {"content": ...}; "" when absent or null.
  std::string bos_token, eos_token, unk_token, pad_token;
  std::vector<std::string> additional_special_tokens;
  std::optional<bool> add_bos_token, add_eos_token;
  std::optional<bool> legacy, add_prefix_space;  // LlamaTokenizer's
  std::vector<AddedToken> added_tokens;          // added_tokens_decoder, by id

  // text: the file's contents ("" for no file); where names it in errors.
  static TokenizerConfig parse(const std::string& text, const std::string& where);
};

// The text of the tokenizer_config.json in tokenizer_path's directory, "" when there is none.
std::string tokenizer_config_beside(const std::string& tokenizer_path);

}  // namespace braid::data
