// braid generate --model DIR [--tokenizer DIR] [--prompt TEXT] [--tokens N] [--temperature T]
//                [--top-k K] [--samples S] [--seed N]
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "braid/cli/command.h"
#include "braid/cli/command_line.h"
#include "braid/cli/option_values.h"
#include "braid/train/train_run.h"

namespace {

int run_generate(const std::vector<std::string>& args) {
  using braid::cli::integer;
  braid::cli::CommandLine cl(
      "generate",
      "Samples text from an exported model directory (model.safetensors + config.json).");
  CLI::App& app = cl.app();
  braid::train::GenerateRequest r;
  // A negative seed wraps around, as it always has.
  int64_t seed = static_cast<int64_t>(r.seed);
  app.add_option("--model", r.model_dir,
                 "the model directory (braid checkpoint export, or a run's exported model)")
      ->type_name("DIR")
      ->required();
  app.add_option("--tokenizer", r.tokenizer,
                 "tokenizer directory (tokenizer.json, tokenizer.model, or GPT-2's encoder.json + "
                 "vocab.bpe)")
      ->type_name("DIR")
      ->capture_default_str();
  app.add_option("--prompt", r.prompt, "the text every sample continues (default: a new line)")
      ->type_name("TEXT");
  app.add_option("--tokens", r.sample.max_new_tokens, "tokens to sample")
      ->type_name("N")
      ->transform(integer<int64_t>())
      ->capture_default_str();
  app.add_option("--temperature", r.sample.temperature, "sampling temperature; 0 = greedy")
      ->type_name("T")
      ->transform(braid::cli::number())
      ->capture_default_str();
  app.add_option("--top-k", r.sample.top_k, "sample among the K likeliest tokens; 0 = all")
      ->type_name("K")
      ->transform(integer<int64_t>())
      ->capture_default_str();
  app.add_option("--samples", r.samples, "samples to print")
      ->type_name("S")
      ->transform(integer<int64_t>())
      ->capture_default_str();
  app.add_option("--seed", seed, "the sampler's random seed")
      ->type_name("N")
      ->transform(integer<int64_t>())
      ->capture_default_str();
  if (auto status = cl.parse(args)) return *status;
  r.seed = static_cast<uint64_t>(seed);
  braid::train::generate_samples(r, stdout);
  return 0;
}

}  // namespace

BRAID_COMMAND("generate", "sample text from an exported model", run_generate);
