// TrainConfig: one typed config for every run, read from braid's YAML. Keys are the struct
// field names (snake_case), grouped in sections. Unknown or misspelt keys, bad types and
// batch arithmetic that does not add up are errors naming the key path and the numbers.
//
// Every field is declared once, in visit_fields() (config.cpp), which drives parsing,
// `--set key=value` overrides and dumping, so the three can never disagree.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "braid/core/dtype.h"
#include "braid/nn/model_config.h"
#include "braid/optim/loss_scaler.h"

namespace braid::config {

struct ModelSection {
  std::string preset = "";     // nn preset name (gpt2-tiny, bench-small, gpt2-small, ...)
  std::string config = "";     // path to an HF config.json (instead of preset)
  std::string init_from = "";  // HF model dir (model.safetensors + config.json) to start from
  // What backward recomputes: none (or false), full (or true: whole blocks), selective (the
  // attention sublayer, Note [Selective recompute]); on every `interval`-th block.
  std::string activation_checkpointing = "none";
  int64_t activation_checkpointing_interval = 1;
  // Comma-separated parameter-name prefixes to freeze ("transformer.wpe,transformer.h.0."):
  // their parameters get no gradient and no update.
  std::string freeze = "";
};

struct DataSection {
  std::string train = "";      // prepared token shard dir (braid prepare-data)
  std::string tokenizer = "";  // dir with encoder.json + vocab.bpe (for samples)
  int64_t seq_len = 256;
  bool random_tokens = false;  // synthetic data (benchmarks); ignores `train`
  int64_t vocab_size = 0;      // for random_tokens; 0 = the model's
};

struct TrainingSection {
  int64_t micro_batch_size = 0;  // per rank, per micro-step
  int64_t gradient_accumulation_steps = 0;
  int64_t global_batch_size = 0;  // = micro x accumulation x data-parallel size
  int64_t max_steps = 100;
  uint64_t seed = 1337;
  int64_t log_interval = 10;
  int64_t eval_interval = 100;  // 0 = only at the end
  int64_t eval_batches = 8;
  // fp32, bf16 or fp16: the dtype forward and backward compute in; master weights, gradients and
  // optimizer state are f32 either way (docs/design.md "Precision"). fp16 scales the loss (fp16).
  std::string precision = "fp32";
  // The dtype gradients are reduced in across ranks (FSDP's reduce_dtype; Note [Reduce dtype]):
  // fp32, bf16 or fp16. They accumulate and reach the optimizer in f32 either way.
  std::string reduce_dtype = "fp32";
  // What a step whose loss or gradients hold inf/nan does (Note [Non-finite steps]): stop
  // (one error naming rank, step and tensor, on every rank), skip (skip the step everywhere and
  // count it) or off (nothing is checked beyond what clipping and loss scaling compute anyway).
  std::string on_nonfinite = "stop";
  // Check every module's output and every parameter's gradient as they are produced, so the
  // first non-finite tensor is named (Note [Anomaly detection]); costs a pass over each.
  bool detect_anomaly = false;
  // Where the model lives and computes: cpu, or cuda (the rank's local index among the ranks
  // of its host) or cuda:N (docs/gpu.md). Not yet with more than one rank, checkpoints, samples
  // or evaluation data: those are refused at start.
  std::string device = "cpu";
  // Where training starts: auto (the newest valid checkpoint under checkpoint.dir, if any),
  // never, or a checkpoint directory (or a directory of them).
  std::string resume = "auto";
};

struct OptimizerSection {
  std::string type = "adamw";  // adamw | sgd
  double lr = 6e-4;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double momentum = 0.0;   // sgd
  bool nesterov = false;   // sgd
  double grad_clip = 1.0;  // 0 = off
};

struct ScheduleSection {
  std::string type = "cosine";  // constant | linear | cosine
  int64_t warmup_steps = 0;
  // linear: lr x step / warmup_steps; log: lr x ln(step + 1) / ln(warmup_steps) (DeepSpeed's
  // WarmupLR default).
  std::string warmup_type = "linear";
  double min_lr_ratio = 0.1;  // decay floor as a fraction of lr
  // Steps the decay takes (0: training.max_steps); the rate stays at the floor after it
  // (DeepSpeed's total_num_steps may differ from the run's length).
  int64_t decay_steps = 0;
  bool scale_lr = false;  // linear scaling rule: lr x global / base_batch_size
  int64_t base_batch_size = 0;
};

struct ParallelSection {
  std::string strategy = "none";  // none | ddp | zero1 | zero2 | zero3 | fsdp
  // fsdp: FULL_SHARD | SHARD_GRAD_OP | NO_SHARD | HYBRID_SHARD | HYBRID_SHARD_ZERO2
  std::string sharding_strategy = "FULL_SHARD";
  int64_t sharding_factor = 0;  // ranks per parameter shard group (0: all; HYBRID_*: per node)
  // Megatron tensor parallelism: ranks per tp group (the strategy runs over world / tp), and
  // sequence parallelism inside it.
  int64_t tensor_parallel_size = 1;
  bool sequence_parallel = false;
  // Context parallelism: ranks each sequence is split over (Note [Context-parallel layout]),
  // attention across them by ring (zig-zag split) or ulysses (all-to-all over heads). The cp
  // ranks of a batch join the data-parallel reduction and sharding.
  int64_t context_parallel_size = 1;
  std::string context_parallel_mode = "ring";
  // Pipeline parallelism (parallel/pipeline/): stages per pipeline (the data-parallel strategy
  // runs over world / (pp x cp x tp)), the schedule (gpipe | 1f1b | interleaved_1f1b | zb_h1 |
  // zb_v), model chunks per rank (interleaved_1f1b; zb_v always 2), how the blocks are split
  // (uniform | parameters | time, Note [Stage balance]) and a Chrome trace of the steps'
  // timelines ("": none).
  int64_t pipeline_parallel_size = 1;
  std::string pipeline_schedule = "1f1b";
  int64_t pipeline_virtual_stages = 1;
  std::string pipeline_balance = "uniform";
  std::string pipeline_trace;
  // Reduce gradients every micro-step (true) or accumulate locally and reduce once (false);
  // auto: false for ddp / zero1, true for zero2 / zero3 / fsdp.
  std::string sync_each_batch = "auto";
  bool forward_prefetch = true;
  bool backward_prefetch = true;
  int64_t limit_all_gathers = 2;
  int64_t param_persistence_threshold = 0;  // zero3/fsdp: units this small stay unsharded
  // zero3/fsdp, per unit (FSDP2's per-module policy; unit names as "embeddings,block.11,head"):
  // units whose parameters stay whole on every rank, and units kept gathered from their forward
  // to their backward (not resharded after forward).
  std::string unsharded_units;
  std::string keep_gathered_units;
  // Offload to files (DeepSpeed's device nvme): none | nvme. The optimizer state, and with
  // offload_params (zero3/fsdp; needs offload_optimizer) the parameter shards.
  std::string offload_optimizer = "none";
  std::string offload_params = "none";
  std::string offload_dir = "";  // "" = <output.dir>/offload
  double bucket_mb = 25.0;
  bool find_unused_parameters = false;
  double comm_timeout_s = 600.0;
  bool comm_debug = false;
  // How ranks on a device communicate (Note [Device groups] in comm/device_group.h): auto (the
  // device's own library where braid has one, NCCL for cuda; else host), nccl (required), host
  // (threads or MPI through host buffers: Note [Device staging]).
  std::string comm_backend = "auto";
};

struct MemorySection {
  // Per-rank budget, e.g. "4GiB": allocations past it fail with braid's OutOfMemory and the
  // per-category breakdown. "" = the node's available memory shared among its ranks; "0" = none.
  std::string budget = "";
};

// DeepSpeed's fp16 block (Note [DeepSpeed's update rules], optim/loss_scaler.cpp); used when
// training.precision is fp16.
struct Fp16Section {
  double loss_scale = 0;  // 0: dynamic; > 0: this static scale
  int64_t initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int64_t hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1;
};

struct CheckpointSection {
  std::string dir = "";   // "" = <output.dir>/checkpoints
  int64_t interval = 0;   // steps between training checkpoints (0: none); the last step too
  bool async = false;     // copy to memory, write in the background (Note [Async save])
  int64_t keep_last = 0;  // step directories kept (0: all)
};

struct OutputSection {
  std::string dir = "out/run";
  bool export_model = true;
  int64_t samples = 2;  // samples generated at the end (0 = none)
  int64_t sample_tokens = 48;
  std::string sample_prompt = "\n";
  // Where each step's time goes, measured beside the step-time model's prediction (Note [Step
  // profile], train/step_profile.h): `braid train --profile`.
  bool profile = false;
};

struct TrainConfig {
  ModelSection model;
  DataSection data;
  TrainingSection training;
  OptimizerSection optimizer;
  ScheduleSection schedule;
  ParallelSection parallel;
  MemorySection memory;
  Fp16Section fp16;
  CheckpointSection checkpoint;
  OutputSection output;

  // checkpoint.dir, or its default under output.dir.
  std::string checkpoint_dir() const;
  // training.precision as the dtype forward and backward compute in (f32, bf16, f16).
  DType compute_dtype() const;
  DType reduce_dtype() const;  // training.reduce_dtype
};

class Provenance;  // provenance.h: where each value came from, for --print-config

// Parses YAML text; `source` names the file in errors. `origins` (may be null) gets
// "source:line" for every key the text sets.
TrainConfig parse_config(const std::string& yaml_text, const std::string& source,
                         Provenance* origins = nullptr);
TrainConfig load_config(const std::string& path, Provenance* origins = nullptr);
// Applies "section.key=value" (value parsed as YAML scalar). Errors name the key. `origins`
// (may be null) gets "--set" for the key.
void apply_override(TrainConfig& cfg, const std::string& assignment, Provenance* origins = nullptr);
// Derives the missing one of micro / accumulation / global for a data-parallel size and
// checks global == micro x accumulation x dp, with the numbers in the error.
void resolve_batch(TrainConfig& cfg, int64_t dp_size);
// How many data-parallel ranks `ranks` ranks make under the config's tensor and pipeline
// parallelism (ranks / (tp x pp)).
int64_t data_parallel_size(const TrainConfig& cfg, int64_t ranks);
// Checks value ranges and choices (lr > 0, known strategy, ...). Errors name the key.
void validate(const TrainConfig& cfg);
// The same for every section but the model's source and the data (what the Accelerator reads:
// a user's own model and data need neither).
void validate_training(const TrainConfig& cfg);
// YAML, every field; with `origins`, each line ends in a comment saying where its value came from
// ("  lr: 0.002  # configs/demo.yaml:18"), and the text still parses back to the same config.
std::string dump_config(const TrainConfig& cfg, const Provenance* origins = nullptr);
// model.activation_checkpointing and its interval as the model's policy (throws naming them).
nn::CheckpointPolicy checkpoint_policy(const TrainConfig& cfg);
// The fp16 section as the loss scaler's config.
optim::LossScalerConfig loss_scaler_config(const TrainConfig& cfg);
// Every field as (section.key, value as YAML text), in declaration order; numbers in their
// shortest exact form, so two configs have equal entries exactly when their fields are equal.
std::vector<std::pair<std::string, std::string>> config_entries(const TrainConfig& cfg);

}  // namespace braid::config
