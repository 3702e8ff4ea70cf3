// HfTokenizer::Model: a tokenizer.json as parsed by hf_tokenizer_load.cpp, immutable and shared
// by every copy of the tokenizer. Internal to hf_tokenizer*.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "braid/data/added_vocabulary.h"
#include "braid/data/bpe_merges.h"
#include "braid/data/hf_tokenizer.h"

namespace braid::data {

struct HfNormalizer {
  enum Kind { kNfc, kPrepend, kReplace } kind;
  std::string a, b;  // kPrepend: a; kReplace: a -> b
};

struct HfPreTokenizer {
  enum Kind { kSplitRegex, kSplitString, kByteLevel, kDigits, kMetaspace } kind;
  enum Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext } behavior = kIsolated;
  bool invert = false;
  int regex = -1;                   // kSplitRegex, kByteLevel with use_regex: index into regexes
  std::string literal;              // kSplitString; kMetaspace: the replacement ("▁")
  bool add_prefix_space = false;    // kByteLevel; kMetaspace: prepend_scheme != "never"
  bool prepend_first_only = false;  // kMetaspace: prepend_scheme "first"
  bool split = true;                // kMetaspace
  bool individual_digits = false;   // kDigits
};

struct HfDecoder {
  enum Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
  std::string a, b;         // kReplace: a -> b; kStrip: a is the character; kMetaspace: a = "▁"
  int start = 0, stop = 0;  // kStrip
  bool add_prefix_space = false;  // kMetaspace
};

struct HfTokenizer::Model {
  std::string where;  // the file, for errors

  // BPE model. Byte-level: token_text holds each token's raw bytes (the vocabulary's
  // byte_unicode spelling undone) and every byte has a token (byte_id). Otherwise token_text
  // is the vocabulary's own spelling ("▁the", "<0x0A>").
  bool byte_level = false;
  std::vector<std::string> token_text;     // by id, vocab and added tokens
  HfStringMap<int32_t> vocab;              // token_text -> id, model vocabulary only
  std::array<int32_t, 256> byte_id{};      // byte-level: the token of each byte
  std::array<int32_t, 256> fallback_id{};  // byte_fallback: <0xNN>, -1 when absent
  bool byte_fallback = false;
  int32_t unk = -1;
  bool fuse_unk = false;
  bool ignore_merges = false;
  BpeMerges merges;

  std::vector<HfNormalizer> normalizers;
  std::vector<HfPreTokenizer> pre_tokenizers;
  std::vector<std::string> regex_patterns;  // compiled per copy (HfTokenizer::regexes_)
  std::vector<HfDecoder> decoders;

  AddedVocabulary added;

  std::vector<int32_t> prefix, suffix;  // bos/eos the post-processor adds around a text
  int32_t bos = -1, eos = -1;
};

}  // namespace braid::data
