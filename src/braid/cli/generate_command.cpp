// braid generate --model DIR [--tokenizer DIR] [--prompt TEXT] [--tokens N] [--temperature T]
//                [--top-k K] [--samples S] [--seed N]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "braid/cli/args.h"
#include "braid/cli/command.h"
#include "braid/core/error.h"
#include "braid/train/train_run.h"

namespace {

int run_generate(const std::vector<std::string>& args) {
  braid::train::GenerateRequest r;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: braid generate --model DIR [--tokenizer DIR (data/gpt2)] [--prompt TEXT]\n"
          "                      [--tokens N (48)] [--temperature T (0.8; 0 = greedy)]\n"
          "                      [--top-k K (40; 0 = all)] [--samples S (1)] [--seed N (1)]\n"
          "Samples text from an exported model directory (model.safetensors + config.json).\n");
      return 0;
    }
    BRAID_CHECK(i + 1 < args.size(), "option '", a, "' needs a value (see braid generate --help)");
    const std::string& v = args[++i];
    if (a == "--model")
      r.model_dir = v;
    else if (a == "--tokenizer")
      r.tokenizer = v;
    else if (a == "--prompt")
      r.prompt = v;
    else if (a == "--tokens")
      r.sample.max_new_tokens = braid::cli::parse_int(a, v);
    else if (a == "--temperature")
      r.sample.temperature = static_cast<float>(braid::cli::parse_number(a, v));
    else if (a == "--top-k")
      r.sample.top_k = braid::cli::parse_int(a, v);
    else if (a == "--samples")
      r.samples = braid::cli::parse_int(a, v);
    else if (a == "--seed")
      r.seed = static_cast<uint64_t>(braid::cli::parse_int(a, v));
    else
      BRAID_THROW("unknown option '", a, "' (see braid generate --help)");
  }
  braid::train::generate_samples(r, stdout);
  return 0;
}

}  // namespace

BRAID_COMMAND("generate", "sample text from an exported model", run_generate);
