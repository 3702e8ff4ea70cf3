// braid prepare-data: text files -> token shards (data/prepare_data.h).
#include <cstdio>
#include <string>
#include <vector>

#include "braid/cli/args.h"
#include "braid/cli/command.h"
#include "braid/core/error.h"
#include "braid/data/prepare_data.h"

namespace {

constexpr const char* kUsage =
    "usage: braid prepare-data --input PATH [--input PATH...] --tokenizer DIR --out DIR\n"
    "                          [--val-fraction F] [--shard-tokens N] [--threads N] [--force]\n"
    "\n"
    "Tokenises text files (each file one document; a directory means its *.txt files) with the\n"
    "GPT-2 BPE in DIR (encoder.json, vocab.bpe) into DIR/train_*.bin, DIR/val_*.bin and\n"
    "DIR/meta.json. A repeat run with the same inputs and options does nothing.\n"
    "\n"
    "  --input PATH        text file or directory (repeatable)\n"
    "  --tokenizer DIR     GPT-2 vocabulary directory (scripts/fetch-data.sh: data/gpt2)\n"
    "  --out DIR           output directory\n"
    "  --val-fraction F    fraction of documents held out for validation (default 0.05)\n"
    "  --shard-tokens N    tokens per shard file (default 100000000)\n"
    "  --threads N         tokenising threads (default: every core)\n"
    "  --force             rebuild even when the output exists\n";

int run_prepare_data(const std::vector<std::string>& args) {
  braid::data::PrepareDataOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--force") {
      o.force = true;
      continue;
    }
    // --flag VALUE or --flag=VALUE
    BRAID_CHECK(a.rfind("--", 0) == 0, "unexpected argument '", a,
                "' (see braid prepare-data --help)");
    std::string flag = a, value;
    if (auto eq = a.find('='); eq != std::string::npos) {
      flag = a.substr(0, eq);
      value = a.substr(eq + 1);
    } else {
      BRAID_CHECK(i + 1 < args.size(), a, " needs a value (see braid prepare-data --help)");
      value = args[++i];
    }
    if (flag == "--input") {
      o.inputs.push_back(value);
    } else if (flag == "--tokenizer") {
      o.tokenizer_dir = value;
    } else if (flag == "--out") {
      o.out_dir = value;
    } else if (flag == "--val-fraction") {
      o.val_fraction = braid::cli::parse_number(flag, value);
    } else if (flag == "--shard-tokens") {
      o.shard_tokens = braid::cli::parse_int(flag, value);
    } else if (flag == "--threads") {
      o.threads = braid::cli::parse_int32(flag, value);
    } else {
      BRAID_THROW("unknown option '", flag, "' (see braid prepare-data --help)");
    }
  }
  BRAID_CHECK(!o.inputs.empty() && !o.tokenizer_dir.empty() && !o.out_dir.empty(),
              "--input, --tokenizer and --out are required (see braid prepare-data --help)");

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
