// prepare_data: text files -> token shards + meta.json, the input DataLoader reads.
//
// Each input file is one document. Documents are tokenised in parallel (one tokenizer copy per
// thread) and written in input order, each preceded by <|endoftext|> (as GPT-2's training data
// and llm.c do), so the output is the same whatever the thread count. A val_fraction of the
// documents, spread evenly over the sorted inputs (Note [Validation split]), goes to
// val_*.bin, the rest to train_*.bin, each split cut into shards of shard_tokens tokens.
//
// out_dir/meta.json records what was read and how; a repeat run whose inputs and options are
// unchanged does nothing, and one whose differ is refused unless force is set.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace braid::data {

struct PrepareDataOptions {
  std::vector<std::string> inputs;  // files, or directories whose *.txt files are read (sorted)
  std::string tokenizer_dir;        // what Tokenizer::from_path reads
  std::string out_dir;
  double val_fraction = 0.05;
  int64_t shard_tokens = 100'000'000;
  int threads = 0;  // 0 = every core
  bool force = false;
  // Called on the calling thread after each document is written: input bytes done and in all.
  std::function<void(int64_t done, int64_t total)> progress;
};

struct SplitSummary {
  int64_t documents = 0;
  int64_t tokens = 0;
  std::vector<std::string> shards;  // file names inside out_dir
};

struct PrepareDataResult {
  bool skipped = false;  // output was already there and up to date
  int64_t input_bytes = 0;
  int32_t vocab_size = 0;
  SplitSummary train, val;
  double seconds = 0;
  std::string meta_path;
};

PrepareDataResult prepare_data(const PrepareDataOptions& options);

// The input files options.inputs names, in the order prepare_data reads them.
std::vector<std::string> list_text_files(const std::vector<std::string>& inputs);
// Which of n documents go to validation (sorted, distinct; empty when val_fraction is 0).
std::vector<int64_t> validation_documents(int64_t n, double val_fraction);

}  // namespace braid::data
