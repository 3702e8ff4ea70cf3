// encode_documents: every document of a list of input files, tokenised on several threads and
// handed back in input order — prepare-data's engine.
//
// Contract: one reader thread walks the files in order through DocumentReader (decompressing,
// splitting JSONL lines); `threads` workers, each with its own clone of the tokenizer, encode
// documents as they come, each as [separator] + encode(text) — or encode(text) alone when the
// tokenizer begins every text with the separator itself (LLaMA's <s>, added by the
// post-processor: encode("") is [<s>]), so a document starts with exactly one separator
// either way; the calling thread receives them
// through `sink` strictly in document order, so what the sink builds is the same for any thread
// count. The reader stays at most `window_documents` documents and `window_bytes` bytes of text
// ahead of the sink (one document always goes), which bounds memory on any corpus: a JSONL file
// of any size costs a window of documents, a text file the size of that one document.
//
// The first error anywhere (reading, parsing, tokenising, the sink) stops every thread and is
// rethrown from encode_documents once all have joined; a tokenizer's error is prefixed with
// where the document starts ("path" or "path:line").
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "braid/data/tokenizer.h"

namespace braid::data {

struct EncodedDocument {
  int64_t index = 0;            // 0-based, over all the files
  std::vector<int32_t> ids;     // separator first
  std::vector<int32_t> flags;   // with a custom encoder that gives them (Note [Token flags])
  int64_t text_bytes = 0;       // the document's bytes (decompressed)
  int64_t file_bytes_done = 0;  // bytes of the input files (as stored) read up to this document
};

struct EncodeDocumentsOptions {
  std::string field = "text";  // JSONL: the document's field
  int32_t separator = -1;      // the id put before every document
  int threads = 1;
  int64_t window_documents = 0;  // 0: 16 per thread
  int64_t window_bytes = int64_t{256} << 20;
  // Instead of [separator] + encode(text): fills the document's ids (and flags) itself, with the
  // worker's own tokenizer (instruction examples, instruct.h).
  std::function<void(std::string_view text, Tokenizer& tok, EncodedDocument& out)> encode;
};

void encode_documents(const std::vector<std::string>& files, const Tokenizer& tokenizer,
                      const EncodeDocumentsOptions& options,
                      const std::function<void(EncodedDocument&)>& sink);

}  // namespace braid::data
