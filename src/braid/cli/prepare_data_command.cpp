// braid prepare-data: text files -> token shards (data/prepare_data.h).
#include <cstdio>
#include <string>
#include <vector>

#include "braid/cli/command.h"
#include "braid/cli/command_line.h"
#include "braid/cli/option_values.h"
#include "braid/data/prepare_data.h"

namespace {

constexpr const char* kDescription =
    "Tokenises text files (each file one document; a directory means its *.txt files) with the "
    "tokenizer in DIR (tokenizer.json, or encoder.json + vocab.bpe) into DIR/train_*.bin, "
    "DIR/val_*.bin and "
    "DIR/meta.json. A repeat run with the same inputs and options does nothing.";

int run_prepare_data(const std::vector<std::string>& args) {
  braid::cli::CommandLine cl("prepare-data", kDescription);
  CLI::App& app = cl.app();
  braid::data::PrepareDataOptions o;
  braid::cli::repeatable(app.add_option("--input", o.inputs, "text file or directory (repeatable)")
                             ->type_name("PATH")
                             ->required());
  app.add_option("--tokenizer", o.tokenizer_dir,
                 "tokenizer directory: tokenizer.json (Hugging Face), or GPT-2's encoder.json + "
                 "vocab.bpe (scripts/fetch-data.sh: data/gpt2)")
      ->type_name("DIR")
      ->required();
  app.add_option("--out", o.out_dir, "output directory")->type_name("DIR")->required();
  app.add_option("--val-fraction", o.val_fraction, "fraction of documents held out for validation")
      ->type_name("F")
      ->transform(braid::cli::number())
      ->capture_default_str();
  app.add_option("--shard-tokens", o.shard_tokens, "tokens per shard file")
      ->type_name("N")
      ->transform(braid::cli::integer<int64_t>())
      ->capture_default_str();
  app.add_option("--threads", o.threads, "tokenising threads (default: every core)")
      ->type_name("N")
      ->transform(braid::cli::integer<int>());
  app.add_flag("--force", o.force, "rebuild even when the output exists");
  if (auto status = cl.parse(args)) return *status;

  const auto r = braid::data::prepare_data(o);
  if (r.skipped) {
    std::printf("%s is up to date (--force rebuilds): ", o.out_dir.c_str());
  } else {
    std::printf("wrote %s in %.2f s: ", o.out_dir.c_str(), r.seconds);
  }
  std::printf(
      "train %lld documents, %lld tokens, %zu shard(s); val %lld documents, %lld tokens, "
      "%zu shard(s); vocab %d; %lld input bytes\n",
      static_cast<long long>(r.train.documents), static_cast<long long>(r.train.tokens),
      r.train.shards.size(), static_cast<long long>(r.val.documents),
      static_cast<long long>(r.val.tokens), r.val.shards.size(), r.vocab_size,
      static_cast<long long>(r.input_bytes));
  return 0;
}

}  // namespace

BRAID_COMMAND("prepare-data", "tokenise text files into token shards", run_prepare_data);
