// braid prepare-data: text files -> token shards (data/prepare_data.h).
#include <unistd.h>

#include <chrono>
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

  // A progress bar on a terminal, redrawn at most 10 times a second.
  const auto start = std::chrono::steady_clock::now();
  auto last_draw = start;
  bool drew = false;
  if (isatty(STDERR_FILENO)) {
    o.progress = [&](int64_t done, int64_t total) {
      const auto now = std::chrono::steady_clock::now();
      if (done < total && now - last_draw < std::chrono::milliseconds(100)) return;
      last_draw = now;
      const double frac = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1;
      const double secs = std::chrono::duration<double>(now - start).count();
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(frac * kWidth);
      std::fprintf(stderr, "\rtokenising [%s%s] %5.1f%% %.1f/%.1f MB, %.1f MB/s",
                   std::string(filled, '#').c_str(), std::string(kWidth - filled, ' ').c_str(),
                   100 * frac, done / 1e6, total / 1e6, secs > 0 ? done / 1e6 / secs : 0.0);
      drew = true;
    };
  }
  braid::data::PrepareDataResult r;
  try {
    r = braid::data::prepare_data(o);
  } catch (...) {
    if (drew) std::fputc('\n', stderr);  // the error goes on a line of its own
    throw;
  }
  if (drew) std::fputc('\n', stderr);
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
