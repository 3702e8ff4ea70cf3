// What a training run says and writes: the header describing the run, the final summary line
// (parsed by bench/ scripts), the HF export and the printed samples. Rank 0 only.
#pragma once

#include <string>

#include "braid/nn/transformer.h"
#include "braid/train/config.h"

namespace braid::train {

struct TrainResult;

std::string describe_run(const TrainConfig& cfg, const nn::Transformer& model, int world_size,
                         double peak_gflops, double flops_per_token);
std::string format_loss(double loss);
// "summary: steps=... tokens_per_s=... mfu=... step_ms=... peak_rss_mib=... ..."
std::string format_summary(const TrainResult& r, double peak_rss_mib, int world_size);
void load_initial_weights(nn::Transformer& model, const std::string& dir);
// Exports the model (output.export_model) to output.dir/model and prints samples
// (output.samples) when a tokenizer is configured.
void write_outputs(const TrainConfig& cfg, nn::Transformer& model, bool quiet);

}  // namespace braid::train
