// What a training run says and writes: the header describing the run, the final summary line
// (parsed by bench/ scripts), the HF export and the printed samples; and where the initial
// weights come from.
#pragma once

#include <functional>
#include <string>

#include "braid/config/config.h"
#include "braid/nn/transformer.h"
#include "braid/train/accelerator.h"
#include "braid/train/generate.h"
#include "braid/train/mfu_peak.h"

namespace braid::train {

struct TrainResult;

// placement: the world's hosts (ProcessGroup::placement), "" on one host; peak_gflops: the
// GEMM peak summed over ranks, `peak` one rank's (where it came from and what ran it).
std::string describe_run(const config::TrainConfig& cfg, const nn::Transformer& model,
                         const Accelerator& acc, int world_size, const std::string& placement,
                         double peak_gflops, double flops_per_token, const MfuPeak& peak);
std::string format_loss(double loss);
// "summary: steps=... tokens_per_s=... mfu=... step_ms=... peak_rss_mib=... ..."
std::string format_summary(const TrainResult& r, double peak_rss_mib, int world_size);
// Fills a unit's parameters with the tensors of model.init_from (an HF model directory, opened
// and checked once); empty without it: Accelerator::prepare's default, GPT-2-style
// initialisation from training.seed.
std::function<void(int, Tensor&)> initial_weights(const config::TrainConfig& cfg,
                                                  const nn::Transformer& model);
// Note [Output paths checked at start]: every path the run will write — the export under
// output.dir, checkpoint.dir (with checkpoint.interval), the offload directory (with
// parallel.offload_optimizer), parallel.pipeline_trace (with a pipeline) — is checked before
// training, so a run does not find out at its end, or at its first save, that it cannot write.
// Walking up each path to its nearest part that exists, that part must be a directory in which
// a file can be created (a probe file, created and removed at once, so permissions, read-only
// mounts and full disks all show). Nothing else is created: directories appear when the run
// writes them. Errors name the key, its value, what goes there and the part that fails:
//   output.dir 'out/f': cannot write the exported model to 'out/f/model': 'out/f' is a file,
//   not a directory
// The tokenizer output.samples will use (data.tokenizer) is loaded once here too.
void check_output_paths(const config::TrainConfig& cfg);
// Exports the model (output.export_model) to output.dir/model and prints samples
// (output.samples) from `logits` (Trainer::last_logits) when a tokenizer is configured. Every
// rank calls it (the runtime may gather units and parameters); only `is_rank0` writes and prints.
void write_outputs(const config::TrainConfig& cfg, nn::Transformer& model, Accelerator& acc,
                   const LastLogits& logits, bool is_rank0, bool quiet);

}  // namespace braid::train
