// HfTokenizer: a Hugging Face tokenizer.json read as HF's `tokenizers` runs it:
//   added/special tokens split out of the raw text (leftmost-longest, lstrip/rstrip honoured)
//   -> each piece between them: normalizer -> pre-tokenizer -> BPE model
//   -> bos/eos from the post-processor, or from tokenizer_config.json's add_bos_token /
//      add_eos_token where it sets them (as transformers' LlamaTokenizerFast rebuilds it).
// Supported, which covers the families braid trains (Note [Supported components]):
//   model          BPE (byte-level, or over characters with byte_fallback / unk), ignore_merges
//   normalizer     NFC, Prepend, Replace (string), Sequence
//   pre_tokenizer  ByteLevel, Split (regex or string; Isolated, Removed, MergedWithPrevious,
//                  MergedWithNext), Digits, Metaspace, Sequence
//   post_processor TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence
//   decoder        ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence
// Anything else is refused on load with one error naming the component and the file.
//
// Text that is not well-formed UTF-8 is read as Python's errors="replace" reads it: each
// ill-formed sequence becomes U+FFFD (HF's tokenizers take only valid strings).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "braid/data/pretokenizer.h"
#include "braid/data/tokenizer.h"

namespace braid::data {

// unordered_map<std::string, V>::find(std::string_view) without building a string.
struct HfStringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using HfStringMap = std::unordered_map<std::string, V, HfStringHash, std::equal_to<>>;

class HfTokenizer : public Tokenizer {
 public:
  // path is a tokenizer.json; tokenizer_config.json beside it is read when present.
  static HfTokenizer from_file(const std::string& path);
  // The two files' text (config_json may be empty); `where` names them in errors.
  static HfTokenizer from_json(const std::string& tokenizer_json, const std::string& config_json,
                               const std::string& where);

  std::unique_ptr<Tokenizer> clone() const override { return std::make_unique<HfTokenizer>(*this); }
  std::string kind() const override { return "hf-tokenizer-json"; }

  using Tokenizer::encode;
  using Tokenizer::encode_ordinary;
  void encode(std::string_view text, std::vector<int32_t>& out) override;
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) override;
  std::string decode(const std::vector<int32_t>& ids) const override;

  int32_t vocab_size() const override;
  int32_t bos_id() const override;
  int32_t eos_id() const override;
  int32_t special_token_id(std::string_view content) const override;

  struct Model;  // hf_tokenizer_model.h

 private:
  explicit HfTokenizer(std::shared_ptr<const Model> model);
  // One stretch of text between added tokens; at_start: it begins the text (Metaspace's
  // prepend_scheme "first").
  void encode_segment(std::string_view text, bool at_start, std::vector<int32_t>& out);
  template <typename Fn>
  void pre_tokenize(size_t step, std::string_view text, bool at_start, Fn& emit);
  void encode_piece(std::string_view piece, std::vector<int32_t>& out);
  void model_piece(std::string_view piece, std::vector<int32_t>& ids) const;

  std::shared_ptr<const Model> model_;
  std::vector<Pretokenizer> regexes_;  // per copy: each owns its match data
  HfStringMap<std::vector<int32_t>> cache_;
};

}  // namespace braid::data
