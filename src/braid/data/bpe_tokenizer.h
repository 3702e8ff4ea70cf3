// BpeTokenizer: OpenAI's GPT-2 byte-level BPE, exactly (same ids as openai/gpt-2 encoder.py
// and tiktoken's "gpt2" encode_ordinary). Text is split by the Pretokenizer, each piece's
// UTF-8 bytes become byte tokens, and merges are applied lowest rank first (Note [Merge order]).
//
// The vocabulary and merges are immutable and shared between copies; each copy owns a cache of
// encoded pieces and its Pretokenizer's match data, so encode() is not thread-safe on one
// object: give each thread its own copy (cheap, it shares the vocabulary).
//
// Unlike HfTokenizer, encode() refuses text that is not valid UTF-8, naming the byte offset.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "braid/data/pretokenizer.h"
#include "braid/data/tokenizer.h"

namespace braid::data {

class BpeTokenizer : public Tokenizer {
 public:
  // encoder.json (token spelling -> id) and vocab.bpe ("#version" line, then one "a b" merge a
  // line, highest priority first), both spelt through byte_unicode.h, as OpenAI ships them.
  static BpeTokenizer from_files(const std::string& encoder_json, const std::string& vocab_bpe);
  // dir/encoder.json and dir/vocab.bpe (what scripts/fetch-data.sh puts in data/gpt2).
  static BpeTokenizer from_dir(const std::string& dir);
  // From memory, spelt as in the files. Every byte must have a token and every merge's
  // concatenation must be in the vocabulary; ids must be dense from 0.
  static BpeTokenizer from_vocab(const std::unordered_map<std::string, int32_t>& vocab,
                                 const std::vector<std::pair<std::string, std::string>>& merges);

  std::unique_ptr<Tokenizer> clone() const override {
    return std::make_unique<BpeTokenizer>(*this);
  }
  std::string kind() const override { return "gpt2-byte-level-bpe"; }

  using Tokenizer::encode;
  using Tokenizer::encode_ordinary;
  // As HF's GPT2Tokenizer: a literal "<|endoftext|>" in the text is the end-of-text token
  // (eot_id(), when the vocabulary has it) and the text between is ordinary text. No bos.
  void encode(std::string_view text, std::vector<int32_t>& out) override;  // appends to out
  // Ordinary text only: "<|endoftext|>" is encoded as the plain characters it is made of (as
  // gpt-3-encoder and tiktoken's encode_ordinary do).
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) override;
  // The bytes of the tokens concatenated (may end inside a UTF-8 character).
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::string_view token_bytes(int32_t id) const;

  int32_t vocab_size() const override;
  int32_t eot_id() const;  // "<|endoftext|>" (50256 for GPT-2); -1 when the vocabulary lacks it
  int32_t bos_id() const override { return eot_id(); }
  int32_t eos_id() const override { return eot_id(); }
  int32_t special_token_id(std::string_view content) const override;
  size_t cache_size() const { return cache_.size(); }

 private:
  struct Model;
  explicit BpeTokenizer(std::shared_ptr<const Model> model);
  void encode_piece(std::string_view piece, std::vector<int32_t>& out);
  void merge(std::string_view piece, std::vector<int32_t>& ids) const;

  std::shared_ptr<const Model> model_;
  Pretokenizer pretokenizer_;
  std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace braid::data
