// braid prepare-data: text and JSONL files -> token shards (data/prepare_data.h).
#include <unistd.h>

#include <algorithm>
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
    "Tokenises text files (each file one document) and JSON Lines files (.jsonl: each line's "
    "\"text\" field, or --field's, one document), either also .gz or .zst compressed, with the "
    "tokenizer in DIR (tokenizer.json, or encoder.json + vocab.bpe) into DIR/train_*.bin, "
    "DIR/val_*.bin and DIR/meta.json; a directory means its *.txt and *.jsonl files at any "
    "depth, in sorted order. With --chat-template, instruction data instead: each JSONL line "
    "an example ({\"prompt\", \"completion\"} or {\"messages\": [{\"role\", "
    "\"content\"}]}) rendered through the template, the loss on the completion and assistant "
    "tokens only (flag shards beside the token shards), one example a row of --seq-len + 1 "
    "tokens. A repeat run with the same inputs and options does nothing; a failed run leaves "
    "the output as it was.";

int run_prepare_data(const std::vector<std::string>& args) {
  braid::cli::CommandLine cl("prepare-data", kDescription);
  CLI::App& app = cl.app();
  braid::data::PrepareDataOptions o;
  braid::cli::repeatable(
      app.add_option("--input", o.inputs, "text or JSONL file, or directory (repeatable)")
          ->type_name("PATH")
          ->required());
  app.add_option("--field", o.field, "JSONL: the string field holding each document")
      ->type_name("NAME")
      ->capture_default_str();
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
  app.add_option("--chat-template", o.chat_template,
                 "instruction data through this role template: plain, chatml or llama3")
      ->type_name("NAME");
  app.add_option("--seq-len", o.seq_len,
                 "instruction data: the data.seq_len it trains with (rows of seq-len + 1 tokens)")
      ->type_name("T")
      ->transform(braid::cli::integer<int64_t>());
  app.add_option("--layout", o.layout,
                 "instruction data: pad (one example a row) or pack (as many as fit, each "
                 "attending to itself only)")
      ->type_name("pad|pack")
      ->capture_default_str();
  app.add_flag("--force", o.force, "rebuild even when the output exists");
  bool progress = false;
  app.add_flag("--progress", progress,
               "print progress to stderr even when it is not a terminal (one line a second)");
  if (auto status = cl.parse(args)) return *status;

  // A progress bar on a terminal, redrawn at most 10 times a second; with --progress elsewhere,
  // a line a second.
  const bool tty = isatty(STDERR_FILENO) != 0;
  const auto start = std::chrono::steady_clock::now();
  auto last_draw = start;
  bool drew = false;
  if (tty || progress) {
    o.progress = [&](const braid::data::PrepareProgress& p) {
      const auto now = std::chrono::steady_clock::now();
      const bool last = p.documents == p.documents_total;
      if (!last && now - last_draw < std::chrono::milliseconds(tty ? 100 : 1000)) return;
      last_draw = now;
      const double frac = p.file_bytes_total > 0 ? static_cast<double>(p.file_bytes) /
                                                       static_cast<double>(p.file_bytes_total)
                                                 : 1;
      const double secs = std::chrono::duration<double>(now - start).count();
      constexpr int kWidth = 30;
      const int filled = std::clamp(static_cast<int>(frac * kWidth), 0, kWidth);
      std::fprintf(stderr,
                   "%stokenising [%s%s] %5.1f%% %.1f/%.1f MB, %lld/%lld documents, %.2f MB/s%s",
                   tty ? "\r" : "", std::string(filled, '#').c_str(),
                   std::string(kWidth - filled, ' ').c_str(), 100 * frac, p.file_bytes / 1e6,
                   p.file_bytes_total / 1e6, static_cast<long long>(p.documents),
                   static_cast<long long>(p.documents_total),
                   secs > 0 ? p.text_bytes / 1e6 / secs : 0.0, tty ? "" : "\n");
      drew = tty;
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
  const char* what = o.chat_template.empty() ? "documents" : "examples";
  std::printf(
      "train %lld %s, %lld tokens, %zu shard(s); val %lld %s, %lld tokens, "
      "%zu shard(s); vocab %d; %lld input bytes\n",
      static_cast<long long>(r.train.documents), what, static_cast<long long>(r.train.tokens),
      r.train.shards.size(), static_cast<long long>(r.val.documents), what,
      static_cast<long long>(r.val.tokens), r.val.shards.size(), r.vocab_size,
      static_cast<long long>(r.input_bytes));
  if (!o.chat_template.empty()) {
    std::printf(
        "examples: train %lld rows (%lld cut to a row), %lld trained tokens; val %lld rows "
        "(%lld cut), %lld trained tokens\n",
        static_cast<long long>(r.train.rows), static_cast<long long>(r.train.truncated),
        static_cast<long long>(r.train.trained), static_cast<long long>(r.val.rows),
        static_cast<long long>(r.val.truncated), static_cast<long long>(r.val.trained));
  }
  if (!r.skipped && r.seconds > 0) {
    const long long tokens = r.train.tokens + r.val.tokens;
    std::printf(
        "tokenised %.2f MB of text, %lld tokens, in %.2f s on %d thread(s): %.2f MB/s, "
        "%.0f tokens/s\n",
        r.text_bytes / 1e6, tokens, r.seconds, r.threads, r.text_bytes / 1e6 / r.seconds,
        static_cast<double>(tokens) / r.seconds);
  }
  return 0;
}

}  // namespace

BRAID_COMMAND("prepare-data", "tokenise text and JSONL files into token shards", run_prepare_data);
