// What the `braid` commands run once their arguments are parsed (cli/ only parses): a training
// run from its config sources, and sampling from an exported model.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "braid/train/accelerator.h"
#include "braid/train/generate.h"

namespace braid::train {

// Loads the config (load_run_config); with print_config prints what a dialect file became and
// every key, resolved, each with where its value came from, and returns. Otherwise trains on the
// world this process was launched into (Accelerator), with the fault plan of launch/fault_plan.h
// when the environment sets one. A failed run prints its error line ("braid train: error: ...")
// while the world is up and throws ReportedError.
void run_training(const RunConfigSources& sources, bool print_config);

struct GenerateRequest {
  std::string model_dir;  // an exported model: model.safetensors + config.json
  std::string tokenizer = "data/gpt2";
  std::string prompt = "\n";
  SampleOptions sample;
  int64_t samples = 1;
  uint64_t seed = 1;
};
// Checks the request, loads the model and tokenizer and writes the samples to `out`.
void generate_samples(const GenerateRequest& request, FILE* out);

}  // namespace braid::train
