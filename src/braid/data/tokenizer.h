// Tokenizer: text <-> token ids, the one interface the CLI (tokenize, prepare-data, generate)
// and the trainer's samples use. Three implementations:
//   BpeTokenizer            OpenAI's GPT-2 files (encoder.json + vocab.bpe), bit-exact with
//                           encoder.py;
//   HfTokenizer             a Hugging Face tokenizer.json (+ tokenizer_config.json): byte-level
//                           BPE (GPT-2, LLaMA-3, Qwen2/3, GPT-NeoX, SmolLM, GPT-4o) and
//                           SentencePiece-style BPE (LLaMA-2, TinyLlama, Mistral: metaspace, byte
//                           fallback), id for id with HF's own implementation
//                           (hf_tokenizer_parity_test.cpp);
//   SentencePieceTokenizer  a SentencePiece tokenizer.model (+ tokenizer_config.json) through
//                           libsentencepiece, as transformers' LlamaTokenizer (LLaMA-1/2,
//                           TinyLlama, Mistral), id for id with the same model's tokenizer.json
//                           (sentencepiece_parity_test.cpp).
// from_path chooses by what is there.
//
// Contract: encode(text) is what HF's tokenizer(text) gives (added and special tokens in the
// text are matched as HF does, then bos/eos as the tokenizer adds them); encode_ordinary(text)
// matches nothing special and adds nothing (tiktoken's encode_ordinary). decode(ids) is the
// bytes the ids stand for, through the tokenizer's decoder (special tokens spelt out), and may
// end inside a UTF-8 character; decode_text(ids) is the same with every ill-formed UTF-8
// sequence replaced by U+FFFD, as HF's decode prints it.
//
// An object is not thread-safe (it caches encoded pieces and owns regex match data): give each
// thread its own clone(), which is cheap (the vocabulary is immutable and shared).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace braid::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // path: a directory holding tokenizer.json (read first, as transformers does),
  // tokenizer.model, or encoder.json + vocab.bpe; or a tokenizer.json or *.model file itself
  // (which picks one where a directory has both). Throws naming the path and what was looked
  // for.
  static std::unique_ptr<Tokenizer> from_path(const std::string& path);

  virtual std::unique_ptr<Tokenizer> clone() const = 0;
  // What meta.json records: "gpt2-byte-level-bpe", "hf-tokenizer-json" or
  // "sentencepiece-model".
  virtual std::string kind() const = 0;

  std::vector<int32_t> encode(std::string_view text);
  virtual void encode(std::string_view text, std::vector<int32_t>& out) = 0;  // appends
  std::vector<int32_t> encode_ordinary(std::string_view text);
  virtual void encode_ordinary(std::string_view text, std::vector<int32_t>& out) = 0;

  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  std::string decode_text(const std::vector<int32_t>& ids) const;

  virtual int32_t vocab_size() const = 0;  // one more than the largest id
  // -1 when the tokenizer has none. GPT-2's "<|endoftext|>" is both.
  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;
  // The id of an added/special token spelt `content` ("<|endoftext|>", "<s>"), or -1.
  virtual int32_t special_token_id(std::string_view content) const = 0;
};

// The token prepare-data puts before each document: bos when the tokenizer has one (LLaMA's
// <s>, <|begin_of_text|>), else "<|endoftext|>" (GPT-2's eot, Qwen's pad/document end), else
// eos; -1 when there is none of these.
int32_t document_separator(const Tokenizer& tok);

// UTF-8 with every ill-formed sequence replaced by U+FFFD, one per maximal subpart (Unicode
// 3.9 / Python's errors="replace" / the WHATWG TextDecoder); well-formed text is returned as is.
std::string replace_ill_formed_utf8(std::string_view bytes);
// Whether bytes is well-formed UTF-8.
bool is_well_formed_utf8(std::string_view bytes);

// A tokenizer file's bytes; an Error naming the path when it cannot be read.
std::string read_tokenizer_file(const std::string& path);

// Copies the tokenizer files of directory `from` into directory `to` in the names Hugging Face
// reads (tokenizer.json, tokenizer_config.json, special_tokens_map.json, tokenizer.model,
// vocab.json, merges.txt, added_tokens.json; GPT-2's encoder.json and vocab.bpe as vocab.json and
// merges.txt, which they are), so AutoTokenizer.from_pretrained(to) loads the same tokenizer.
// Each file is written to a temporary name and renamed. Returns the names written (none when
// `from` holds no tokenizer files).
std::vector<std::string> export_tokenizer_files(const std::string& from, const std::string& to);

}  // namespace braid::data
