// braid generate --model DIR [--tokenizer DIR] [--prompt TEXT] [--tokens N] [--temperature T]
//                [--top-k K] [--samples S] [--seed N]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "braid/checkpoint/hf_model_io.h"
#include "braid/cli/args.h"
#include "braid/cli/command.h"
#include "braid/core/error.h"
#include "braid/data/bpe_tokenizer.h"
#include "braid/train/generate.h"
#include "braid/train/threads.h"

namespace {

int run_generate(const std::vector<std::string>& args) {
  std::string model_dir, tokenizer = "data/gpt2", prompt = "\n";
  braid::train::SampleOptions so;
  int64_t samples = 1;
  uint64_t seed = 1;
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
      model_dir = v;
    else if (a == "--tokenizer")
      tokenizer = v;
    else if (a == "--prompt")
      prompt = v;
    else if (a == "--tokens")
      so.max_new_tokens = braid::cli::parse_int(a, v);
    else if (a == "--temperature")
      so.temperature = static_cast<float>(braid::cli::parse_number(a, v));
    else if (a == "--top-k")
      so.top_k = braid::cli::parse_int(a, v);
    else if (a == "--samples")
      samples = braid::cli::parse_int(a, v);
    else if (a == "--seed")
      seed = static_cast<uint64_t>(braid::cli::parse_int(a, v));
    else
      BRAID_THROW("unknown option '", a, "' (see braid generate --help)");
  }
  BRAID_CHECK(!model_dir.empty(), "missing --model DIR (an exported model directory)");
  BRAID_CHECK(so.max_new_tokens > 0, "--tokens must be positive, got ", so.max_new_tokens);
  BRAID_CHECK(so.top_k >= 0, "--top-k must be >= 0, got ", so.top_k);
  braid::train::apply_threads_per_rank();
  auto model = braid::checkpoint::import_hf(model_dir, /*allocate_grads=*/false);
  auto tok = braid::data::BpeTokenizer::from_dir(tokenizer);
  BRAID_CHECK(tok.vocab_size() <= model->config().vocab_size, "tokenizer '", tokenizer, "' has ",
              tok.vocab_size(), " tokens but the model's vocab_size is ",
              model->config().vocab_size);
  so.stop_token = tok.eot_id();
  braid::Rng rng(seed);
  std::vector<int32_t> ids = tok.encode(prompt);
  for (int64_t s = 0; s < samples; ++s) {
    if (samples > 1) std::printf("--- sample %lld ---\n", static_cast<long long>(s + 1));
    std::printf("%s\n", tok.decode_text(braid::train::sample(*model, ids, so, rng)).c_str());
  }
  return 0;
}

}  // namespace

BRAID_COMMAND("generate", "sample text from an exported model", run_generate);
