// prepare_data: text and JSONL files -> token shards + meta.json, the input DataLoader reads.
//
// Inputs (list_text_files): files, and directories read recursively in sorted path order, of
// plain text (.txt: the file is one document) and JSON Lines (.jsonl: each line's string field
// `field` is one document), either also gzip- or zstd-compressed (.gz, .zst), see
// document_reader.h. Documents are tokenised in parallel (encode_documents.h) and written in
// input order, each preceded by the tokenizer's separator (document_separator: <|endoftext|>
// for GPT-2, as GPT-2's training data and llm.c do), so the output is the same whatever the
// thread count. A val_fraction of the documents, spread evenly over the inputs (Note
// [Validation split]), goes to val_*.bin, the rest to train_*.bin, each split cut into shards of
// shard_tokens tokens. The number of documents is counted first (JSONL files are read twice:
// once counting non-blank lines, once tokenising) so the split can be placed while streaming.
//
// Note [Nothing half-written]: shards are written under out_dir/.prepare-data.tmp/ and moved
// into out_dir only once every document is written; then the old meta.json and shards go and
// the new meta.json is written (atomically) last. A run that fails (a malformed line, a corrupt
// stream, a tokenizer error) removes its temporary directory, and out_dir if it made it, so it
// leaves what was there before untouched and no partial shard.
//
// Instruction data (chat_template set: instruct.h): every JSONL line is an example, rendered
// through the template into ids and flags (Note [Token flags]) and laid out in rows of
// seq_len + 1 tokens, one example a row padded to the end (layout "pad"), or as many whole
// examples a row as fit, in order (layout "pack": Note [Packed rows], nn/sequence_layout.h); an
// example longer than a row is cut to it (counted in `truncated`). Flag shards are written beside
// the token shards, and meta.json records row_tokens, which braid train checks against
// data.seq_len.
//
// out_dir/meta.json records what was read and how; a repeat run whose inputs and options are
// unchanged does nothing, and one whose differ is refused unless force is set.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace braid::data {

struct PrepareProgress {
  int64_t file_bytes = 0, file_bytes_total = 0;  // of the input files as stored
  int64_t documents = 0, documents_total = 0;
  int64_t text_bytes = 0;  // documents' bytes tokenised (decompressed)
  int64_t tokens = 0;
};

struct PrepareDataOptions {
  std::vector<std::string> inputs;  // files and directories (list_text_files)
  std::string field = "text";       // JSONL: the string field holding each document
  std::string tokenizer_dir;        // what Tokenizer::from_path reads
  std::string out_dir;
  double val_fraction = 0.05;
  int64_t shard_tokens = 100'000'000;
  int threads = 0;  // 0 = every core
  bool force = false;
  // Instruction data: the template ("" reads documents), the rows' seq_len, the layout ("pad" or
  // "pack").
  std::string chat_template;
  int64_t seq_len = 0;
  std::string layout = "pad";
  // Called on the calling thread after each document is written.
  std::function<void(const PrepareProgress&)> progress;
};

struct SplitSummary {
  int64_t documents = 0;  // or examples
  int64_t tokens = 0;
  // Instruction data: rows written, examples cut to a row, tokens trained.
  int64_t rows = 0, truncated = 0, trained = 0;
  std::vector<std::string> shards;  // file names inside out_dir
};

struct PrepareDataResult {
  bool skipped = false;     // output was already there and up to date
  int64_t input_bytes = 0;  // the input files as stored
  int64_t text_bytes = 0;   // what was tokenised (0 when skipped)
  int threads = 0;          // tokenising threads used
  int32_t vocab_size = 0;
  SplitSummary train, val;
  double seconds = 0;
  std::string meta_path;
};

PrepareDataResult prepare_data(const PrepareDataOptions& options);

// The input files options.inputs names, in the order prepare_data reads them: a file as given;
// a directory's *.txt and *.jsonl files (also .gz, .zst) at any depth, sorted by path.
std::vector<std::string> list_text_files(const std::vector<std::string>& inputs);
// Which of n documents go to validation (sorted, distinct; empty when val_fraction is 0).
std::vector<int64_t> validation_documents(int64_t n, double val_fraction);

}  // namespace braid::data
