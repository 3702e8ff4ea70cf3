// SentencePieceTokenizer: a SentencePiece model (tokenizer.model: LLaMA-1/2, TinyLlama, Mistral,
// Vicuna...) encoded by Debian's libsentencepiece, with the tokenizer_config.json beside it read
// as transformers' slow LlamaTokenizer reads it:
//   added and special tokens (added_tokens_decoder, bos/eos/unk/pad_token,
//   additional_special_tokens) split out of the raw text as HfTokenizer does (AddedVocabulary)
//   -> each stretch between them encoded by sentencepiece
//   -> bos/eos as add_bos_token / add_eos_token say (LlamaTokenizer's defaults: bos, no eos).
// Without a tokenizer_config.json the model's own <unk>, <s>, </s> are the special tokens.
// A tokenizer_class other than LlamaTokenizer(Fast) is refused by name: other classes
// (AlbertTokenizer, T5Tokenizer...) change the text or the ids around sentencepiece.
//
// Note [SentencePiece and HF]: which HF behaviour this matches, where the two HF tokenizers of
// one model differ.
//   legacy (tokenizer_config.json; absent = true, as transformers): each stretch between added
//     tokens gets sentencepiece's dummy prefix "▁". LlamaTokenizerFast on the model's
//     tokenizer.json does the same (its Prepend normalizer), so with legacy the two are one:
//     sentencepiece_parity_test.cpp checks the ids against HF's tokenizer.json implementation,
//     id for id, on LLaMA-2's files.
//   legacy false (some configs, e.g. TinyLlama's chat model's): as the slow LlamaTokenizer's
//     code reads (tested against ids worked out from it, not run: no Python here), "▁" is put
//     before the text only (add_prefix_space), the dummy prefix is turned off, a space after a
//     special token stays one "▁" ("</s> Hi" -> </s> "▁Hi"), and a lone "▁" before a leading
//     special token is dropped. A tokenizer.json ignores "legacy" (HF's fast tokenizer keeps
//     its Prepend), so there braid's two readers of one model differ exactly as HF's two do.
//   decode follows the tokenizer.json decoder of these models (LlamaTokenizerFast): "▁" ->
//     space, <0xNN> runs -> their bytes (U+FFFD per byte where they are not UTF-8), special
//     tokens spelt out, one leading space dropped when the model adds the dummy prefix. So
//     the same ids read the same whichever file braid loaded. sentencepiece's own decode
//     differs: it drops control tokens (<s>, </s>) and spells <unk> " ⁇ ".
//   Text that is not well-formed UTF-8 is read as Python's errors="replace" (U+FFFD per
//     maximal subpart), as HfTokenizer reads it; sentencepiece by itself would put one U+FFFD
//     per bad byte.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "braid/data/tokenizer.h"

namespace braid::data {

class SentencePieceTokenizer : public Tokenizer {
 public:
  // path is a tokenizer.model; tokenizer_config.json beside it is read when present.
  static SentencePieceTokenizer from_file(const std::string& path);
  // The model file's bytes and tokenizer_config.json's text (may be empty); `where` names the
  // model in errors.
  static SentencePieceTokenizer from_model(const std::string& model_bytes,
                                           const std::string& config_json,
                                           const std::string& where);

  std::unique_ptr<Tokenizer> clone() const override;
  std::string kind() const override { return "sentencepiece-model"; }

  using Tokenizer::encode;
  using Tokenizer::encode_ordinary;
  void encode(std::string_view text, std::vector<int32_t>& out) override;
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) override;
  std::string decode(const std::vector<int32_t>& ids) const override;

  int32_t vocab_size() const override;
  int32_t bos_id() const override;
  int32_t eos_id() const override;
  int32_t special_token_id(std::string_view content) const override;

  struct Model;  // sentencepiece_tokenizer.cpp

 private:
  explicit SentencePieceTokenizer(std::shared_ptr<const Model> model);
  // One stretch of text between added tokens, through sentencepiece.
  void encode_stretch(std::string_view text, std::vector<int32_t>& out) const;

  // Immutable and shared by copies: libsentencepiece's Encode is const and thread-safe.
  std::shared_ptr<const Model> model_;
};

}  // namespace braid::data
