#include "braid/config/deepspeed_config.h"
#include "braid/config/deepspeed_sections.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "braid/config/closest_key.h"
#include "braid/config/dialect_reader.h"
#include "braid/config/duplicate_keys.h"
#include "braid/core/error.h"

namespace braid::config {

namespace {

using dialect::DialectReader;
using dialect::format_number;
using dialect::json;
using dialect::show;

// DeepSpeed's batch arithmetic (runtime/config.py, _configure_train_batch_size): any two of
// train_batch_size, train_micro_batch_size_per_gpu and gradient_accumulation_steps give the
// third; one alone takes accumulation 1; all three must agree with the data-parallel size.
void resolve_deepspeed_batch(DialectReader& r, TrainConfig& cfg, int64_t dp) {
  const int64_t big = int64_t{1} << 40;
  const char* keys[] = {"train_batch_size", "train_micro_batch_size_per_gpu",
                        "gradient_accumulation_steps"};
  if (!r.find(keys[0]) && !r.find(keys[1]) && !r.find(keys[2])) {
    r.note("train_batch_size", "absent, as the other two: the YAML's batch sizes hold");
    return;
  }
  // "auto" takes the YAML's value (when it has one); absent is absent, as for DeepSpeed.
  enum class From { file, yaml, arithmetic };
  From from[3] = {From::arithmetic, From::arithmetic, From::arithmetic};
  auto take = [&](int i, int64_t braid_value) -> std::optional<int64_t> {
    if (auto v = r.integer(keys[i], 1, big)) {
      from[i] = From::file;
      return v;
    }
    if (r.is_auto(r.find(keys[i])) && braid_value > 0) {
      from[i] = From::yaml;
      return braid_value;
    }
    return std::nullopt;
  };
  auto tbs = take(0, cfg.training.global_batch_size);
  auto mb = take(1, cfg.training.micro_batch_size);
  auto gas = take(2, cfg.training.gradient_accumulation_steps);
  if (!tbs && !mb)
    r.fail("train_batch_size",
           "either train_batch_size or train_micro_batch_size_per_gpu must be given (here or as "
           "training.global_batch_size / training.micro_batch_size in the YAML)");
  if (tbs && mb && !gas) gas = *tbs / *mb / dp;
  if (tbs && gas && !mb) mb = *tbs / *gas / dp;
  if (mb && !tbs) {
    if (!gas) gas = 1;
    tbs = *mb * *gas * dp;
  }
  if (tbs && !mb) {
    gas = 1;
    mb = *tbs / dp;
  }
  if (*tbs != *mb * *gas * dp || *mb < 1 || *gas < 1)
    r.fail("train_batch_size",
           std::to_string(*tbs) + " != train_micro_batch_size_per_gpu " + std::to_string(*mb) +
               " x gradient_accumulation_steps " + std::to_string(*gas) + " x data-parallel size " +
               std::to_string(dp) + " (= " + std::to_string(*mb * *gas * dp) + ")");
  cfg.training.global_batch_size = *tbs;
  cfg.training.micro_batch_size = *mb;
  cfg.training.gradient_accumulation_steps = *gas;
  // The file's values as given, the arithmetic's with how (the reader noted each "auto" kept).
  const std::string t = std::to_string(*tbs), m = std::to_string(*mb), g = std::to_string(*gas),
                    d = std::to_string(dp);
  const bool one_given = from[0] == From::arithmetic || from[1] == From::arithmetic;
  const std::string how[3] = {
      "global_batch_size = micro " + m + " x accumulation " + g + " x dp " + d,
      "micro_batch_size = global " + t + " / (accumulation " + g + " x dp " + d + ")",
      one_given
          ? "gradient_accumulation_steps = 1, DeepSpeed's with one batch size given"
          : "gradient_accumulation_steps = global " + t + " / (micro " + m + " x dp " + d + ")"};
  const char* braid_keys[] = {"training.global_batch_size", "training.micro_batch_size",
                              "training.gradient_accumulation_steps"};
  const int64_t values[] = {*tbs, *mb, *gas};
  for (int i = 0; i < 3; ++i) {
    const std::string effect = std::string(braid_keys[i]) + " = " + std::to_string(values[i]);
    if (from[i] == From::file) r.note(keys[i], effect);
    if (from[i] == From::arithmetic) r.derived(keys[i], effect, how[i]);
  }
}

void read_precision(DialectReader& r, TrainConfig& cfg) {
  const bool has_fp16 = r.section("fp16");
  const std::string bf16_key = r.find("bfloat16") ? "bfloat16" : "bf16";  // both spellings
  const bool has_bf16 = r.section(bf16_key);
  r.section(bf16_key == "bf16" ? "bfloat16" : "bf16");
  // -1: absent or "auto" (the YAML's precision holds), 0: off, 1: on.
  // A block without "enabled" is off (DeepSpeed's default), unlike an absent block.
  auto state = [&](bool has, const std::string& key) {
    if (!has) return -1;
    const auto v = r.boolean(key);
    if (!v && !r.is_auto(r.find(key))) return 0;
    return v ? (*v ? 1 : 0) : -1;
  };
  const int fp16 = state(has_fp16, "fp16.enabled");
  const int bf16 = state(has_bf16, bf16_key + ".enabled");
  if (fp16 == 1 && bf16 == 1)
    r.fail("fp16.enabled", "and " + bf16_key + ".enabled are both true; choose one");
  if (fp16 == 1) {
    cfg.training.precision = "fp16";
  } else if (bf16 == 1) {
    cfg.training.precision = "bf16";
  } else if (fp16 == 0 || bf16 == 0) {
    cfg.training.precision = "fp32";  // mixed precision explicitly off
  }
  // The key that decided: one that is on, else one given off, else one off by default.
  const std::string fp16_on = "fp16.enabled", bf16_on = bf16_key + ".enabled";
  std::string decided;
  if (fp16 == 1 || bf16 == 1)
    decided = fp16 == 1 ? fp16_on : bf16_on;
  else if (fp16 == 0 || bf16 == 0)
    decided = (fp16 == 0 && (r.find(fp16_on) || bf16 != 0)) ? fp16_on : bf16_on;
  for (const std::string& key : {fp16_on, bf16_on}) {
    const bool off_by_default = (key == fp16_on ? fp16 : bf16) == 0 && !r.find(key);
    const std::string effect =
        key == decided ? "training.precision = " + cfg.training.precision : std::string();
    if (off_by_default)
      r.defaulted(key, effect.empty() ? "false" : "false, " + effect);
    else if (!effect.empty())
      r.note(key, effect);
  }
  if (has_fp16) {
    // A missing loss-scaler key takes DeepSpeed's default (loss_scaler.py), not the YAML's.
    Fp16Section& f = cfg.fp16;
    const Fp16Section ds_defaults;  // braid's defaults are DeepSpeed's
    auto said = [&](const char* k, const std::string& value) {
      r.note(std::string("fp16.") + k, std::string("fp16.") + k + " = " + value);
    };
    auto absent = [&](const char* k, auto& field, auto value, const std::string& shown) {
      if (r.find(std::string("fp16.") + k)) return;
      field = value;
      r.defaulted(std::string("fp16.") + k, std::string("fp16.") + k + " = " + shown);
    };
    absent("loss_scale", f.loss_scale, ds_defaults.loss_scale, "0 (dynamic)");
    absent("initial_scale_power", f.initial_scale_power, ds_defaults.initial_scale_power, "16");
    absent("loss_scale_window", f.loss_scale_window, ds_defaults.loss_scale_window, "1000");
    absent("hysteresis", f.hysteresis, ds_defaults.hysteresis, "2");
    absent("consecutive_hysteresis", f.consecutive_hysteresis, false, "false");
    absent("min_loss_scale", f.min_loss_scale, ds_defaults.min_loss_scale, "1");
    if (auto v = r.number("fp16.loss_scale", 0, 1e30))
      f.loss_scale = *v, said("loss_scale", format_number(*v));
    if (auto v = r.integer("fp16.initial_scale_power", 0, 126))
      f.initial_scale_power = *v, said("initial_scale_power", std::to_string(*v));
    if (auto v = r.integer("fp16.loss_scale_window", 1, INT64_MAX))
      f.loss_scale_window = *v, said("loss_scale_window", std::to_string(*v));
    if (auto v = r.integer("fp16.hysteresis", 1, INT64_MAX))
      f.hysteresis = *v, said("hysteresis", std::to_string(*v));
    if (auto v = r.boolean("fp16.consecutive_hysteresis"))
      f.consecutive_hysteresis = *v, said("consecutive_hysteresis", *v ? "true" : "false");
    if (auto v = r.number("fp16.min_loss_scale", 1e-30, 1e30))
      f.min_loss_scale = *v, said("min_loss_scale", format_number(*v));
    r.ignore("fp16.auto_cast", "braid casts every compute copy itself (training.precision)");
    if (r.boolean("fp16.fp16_master_weights_and_grads").value_or(false))
      r.unsupported("fp16.fp16_master_weights_and_grads",
                    "braid keeps f32 master weights and gradients");
  }
  if (has_bf16) {
    r.ignore(bf16_key + ".immediate_grad_update", "gradients are f32 in braid");
    r.ignore(bf16_key + ".check_grad_overflow", "braid checks every step (training.on_nonfinite)");
    // DeepSpeed reads only enabled and immediate_grad_update here; copies of fp16's loss-scaler
    // keys (its torch_compile tests carry them) have no effect there either.
    for (const char* k : {"loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                          "consecutive_hysteresis", "min_loss_scale", "auto_cast"})
      r.ignore(bf16_key + "." + k, "bf16 needs no loss scaling; DeepSpeed does not read it either");
  }
}

void read_zero(DialectReader& r, TrainConfig& cfg) {
  const bool has = r.section("zero_optimization");
  const auto given_stage =
      has ? r.integer("zero_optimization.stage", 0, 3, false) : std::optional<int64_t>();
  const int64_t stage = given_stage.value_or(0);
  static const char* kStrategy[] = {"ddp", "zero1", "zero2", "zero3"};
  cfg.parallel.strategy = kStrategy[stage];
  if (given_stage)
    r.note("zero_optimization.stage", "parallel.strategy = " + cfg.parallel.strategy);
  else if (has)
    r.defaulted("zero_optimization.stage", "parallel.strategy = ddp (stage 0)");
  if (!has) {  // stage 0, which offloads nothing
    cfg.parallel.offload_optimizer = cfg.parallel.offload_params = "none";
    r.defaulted("zero_optimization",
                "parallel.strategy = ddp (stage 0), parallel.offload_optimizer = none, "
                "parallel.offload_params = none");
    return;
  }
  const std::string z = "zero_optimization.";
  // Offload in braid: DeepSpeed's default (no offload block, or no device), "none" and a device
  // below the stage it takes effect at are none; "nvme" is nvme; "cpu" is none on the CPU device
  // (the state is in host memory already) and, for the optimizer on a device, cpu.
  auto offload = [&](const std::string& what, int64_t min_stage, std::string& device_field,
                     const std::string& braid_key) {
    const std::string s = z + what;
    if (!r.section(s)) {
      device_field = "none";
      r.defaulted(s, braid_key + " = none");
      return;
    }
    const bool given = r.find(s + ".device") != nullptr;
    std::string device = r.choice(s + ".device", {"none", "cpu", "nvme"}).value_or("none");
    device_field = "none";
    if (device != "none" && stage < min_stage) {
      r.note(s + ".device", braid_key + " = none ('" + device +
                                "' takes effect from zero_optimization.stage " +
                                std::to_string(min_stage) + "; DeepSpeed ignores it at stage " +
                                std::to_string(stage) + " too)");
      device = "none";
    } else if (device == "cpu" && cfg.training.device == "cpu") {
      r.note(s + ".device",
             braid_key + " = none (braid trains on the CPU; this is already in host memory)");
    } else if (device == "cpu" && what == "offload_optimizer") {
      // Note [Optimizer state on the host]: ZeRO-Offload on a device.
      device_field = "cpu";
      r.note(s + ".device", braid_key + " = cpu (the state in host memory, the step on the CPU)");
    } else if (device == "cpu") {
      r.note(s + ".device", braid_key +
                                " = none (braid offloads parameter shards to files only, "
                                "device nvme; on " +
                                cfg.training.device + " they stay in device memory)");
    } else if (device == "none") {
      if (given)
        r.note(s + ".device", braid_key + " = none");
      else
        r.defaulted(s + ".device", braid_key + " = none");
    } else if (device == "nvme") {
      device_field = "nvme";
      r.note(s + ".device", braid_key + " = nvme");
      if (const json* p = r.find(s + ".nvme_path")) {
        if (!p->is_string()) r.fail(s + ".nvme_path", "must be a path, got " + show(*p));
        cfg.parallel.offload_dir = p->get<std::string>();
        r.note(s + ".nvme_path", "parallel.offload_dir = " + cfg.parallel.offload_dir);
      }
    }
    for (const char* k : {"pin_memory", "buffer_count", "buffer_size", "fast_init", "max_in_cpu",
                          "ratio", "pipeline", "pipeline_read", "pipeline_write"})
      r.ignore(s + "." + k, "buffering of DeepSpeed's swapper; braid reads ahead by unit");
    if (device != "nvme") r.ignore(s + ".nvme_path", "device is not nvme");
  };
  offload("offload_optimizer", 1, cfg.parallel.offload_optimizer, "parallel.offload_optimizer");
  offload("offload_param", 3, cfg.parallel.offload_params, "parallel.offload_params");
  if (cfg.parallel.offload_params == "nvme" && cfg.parallel.offload_optimizer != "nvme")
    r.unsupported(z + "offload_param.device",
                  "braid offloads parameters only together with the optimizer state: set "
                  "zero_optimization.offload_optimizer.device to nvme too");
  if (r.boolean(z + "cpu_offload_param").value_or(false))
    r.note(z + "cpu_offload_param",
           "ignored: braid trains on the CPU; parameters are in host memory");
  if (r.boolean(z + "cpu_offload").value_or(false))
    r.note(z + "cpu_offload", "ignored: braid trains on the CPU; the state is in host memory");
  r.ignore(z + "overlap_comm", "braid always overlaps gradient reduction with backward");
  r.ignore(z + "contiguous_gradients", "gradients live in one flat buffer already");
  if (auto v = r.integer(z + "reduce_bucket_size", 0, INT64_MAX); v && *v == 0) {
    r.note(z + "reduce_bucket_size",
           "ignored: 0 (one bucket per gradient); parallel.bucket_mb holds");
  } else if (v) {
    cfg.parallel.bucket_mb = static_cast<double>(*v) * 4.0 / (1 << 20);  // f32 elements
    r.note(z + "reduce_bucket_size",
           "parallel.bucket_mb = " + format_number(cfg.parallel.bucket_mb));
  }
  if (r.find(z + "allgather_bucket_size") && !r.is_auto(r.find(z + "allgather_bucket_size")))
    r.integer(z + "allgather_bucket_size", 1, INT64_MAX);
  r.ignore(z + "allgather_bucket_size", "parameters are gathered unit by unit (a block)");
  r.boolean(z + "allgather_partitions");
  r.boolean(z + "reduce_scatter");
  r.ignore(z + "allgather_partitions", "the same result either way; braid all-gathers");
  r.ignore(z + "reduce_scatter", "the same result either way; braid reduce-scatters");
  r.integer(z + "stage3_prefetch_bucket_size", 0, INT64_MAX);
  r.ignore(z + "stage3_prefetch_bucket_size",
           "braid prefetches by unit (parallel.forward_prefetch, backward_prefetch, "
           "limit_all_gathers)");
  if (auto v = r.integer(z + "stage3_param_persistence_threshold", 0, INT64_MAX)) {
    cfg.parallel.param_persistence_threshold = *v;
    r.note(z + "stage3_param_persistence_threshold",
           "parallel.param_persistence_threshold = " + std::to_string(*v));
  }
  for (const char* k : {"stage3_max_live_parameters", "stage3_max_reuse_distance"}) {
    r.integer(z + k, 0, INT64_MAX);
    r.ignore(z + k, "braid frees a gathered unit after use and caps gathers by unit count");
  }
  for (const char* k :
       {"stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save"}) {
    r.boolean(z + k);
    r.ignore(z + k, "braid's export always gathers the whole weights");
  }
  r.integer(z + "sub_group_size", 1, INT64_MAX);
  r.ignore(z + "sub_group_size", "the optimizer already steps shard by shard");
  for (const char* k :
       {"round_robin_gradients", "elastic_checkpoint", "ignore_unused_parameters",
        "load_from_fp32_weights", "use_multi_rank_bucket_allreduce", "memory_efficient_linear",
        "legacy_stage1", "pipeline_loading_checkpoint", "override_module_apply",
        "log_trace_cache_warnings", "cpu_offload_use_pin_memory",
        "stage3_use_all_reduce_for_fetch_params", "mics_hierarchical_params_gather"}) {
    r.boolean(z + k);
    r.ignore(z + k, "no effect on braid's result");
  }
  for (const char* k : {"model_persistence_threshold", "stage3_model_persistence_threshold",
                        "stage3_module_granularity_threshold"}) {
    r.integer(z + k, 0, INT64_MAX);
    r.ignore(z + k, "braid's unit is a transformer block");
  }
  for (const char* k : {"zero_quantized_weights", "zero_quantized_nontrainable_weights",
                        "zero_quantized_gradients"})
    if (r.boolean(z + k).value_or(false)) r.unsupported(z + k, "ZeRO++ quantized communication");
  r.ignore(z + "zeropp_loco_param", "ZeRO++ quantized gradients are off");
  if (auto v = r.integer(z + "zero_hpz_partition_size", 0, INT64_MAX); v && *v > 1)
    r.unsupported(z + "zero_hpz_partition_size",
                  "ZeRO++ hierarchical partitioning; FSDP's HYBRID_SHARD is the nearest");
  if (auto v = r.integer(z + "mics_shard_size", -1, INT64_MAX); v && *v > 0)
    r.unsupported(z + "mics_shard_size", "MiCS; FSDP's HYBRID_SHARD is the nearest");
}

void read_rest(DialectReader& r, TrainConfig& cfg) {
  if (auto v = r.number("gradient_clipping", 0, 1e30)) {
    cfg.optimizer.grad_clip = *v;
    r.note("gradient_clipping", "optimizer.grad_clip = " + format_number(*v));
  }
  // DeepSpeed's own log line (HF-style files say 2000, or 10): braid's progress line keeps
  // training.log_interval.
  r.integer("steps_per_print", 1, INT64_MAX);
  r.ignore("steps_per_print",
           "DeepSpeed's own log interval; braid's progress line keeps training.log_interval");
  if (auto v = r.choice("communication_data_type", {"fp32", "fp16", "bf16"})) {
    cfg.training.reduce_dtype = *v;
    r.note("communication_data_type", "training.reduce_dtype = " + *v);
  }
  if (r.section("data_types")) {
    auto v = r.choice("data_types.grad_accum_dtype", {"fp32", "fp16", "bf16"});
    if (v && *v != "fp32")
      r.unsupported("data_types.grad_accum_dtype", "gradients accumulate in fp32 in braid");
    r.ignore("data_types.grad_accum_dtype", "fp32, as braid");
  }
  r.boolean("prescale_gradients");
  r.number("gradient_predivide_factor", 1e-30, 1e30);
  for (const char* k : {"prescale_gradients", "gradient_predivide_factor"})
    r.ignore(k, "braid sums in rank order in f32 and divides once");
  for (const char* k : {"wall_clock_breakdown", "memory_breakdown", "dump_state"})
    r.ignore(k, "monitoring: braid prints its own step line, timings and memory table");
  // Monitors: off or empty is absent; on, braid's own step line, timings and memory table do it.
  for (const char* k :
       {"flops_profiler", "tensorboard", "wandb", "csv_monitor", "comet", "comms_logger", "timers"})
    if (!r.switched_off(k))
      r.ignore(k, "monitoring: braid prints its own step line, timings and memory table");
  for (const char* k :
       {"zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "sparse_gradients",
        "disable_allgather", "dataloader_drop_last", "graph_harvesting",
        "use_data_before_expert_parallelism", "vocabulary_size"})
    r.ignore(k, "no effect in braid");
  r.ignore("seq_parallel_communication_data_type",
           "braid's Ulysses all-to-alls carry the compute dtype");
  r.ignore("activation_checkpointing",
           "set model.activation_checkpointing in the YAML (full, selective, interval)");
  r.ignore("aio", "DeepSpeed's async I/O library; braid's offload does its own file I/O");
  r.ignore("checkpoint", "braid's own checkpoints (checkpoint.* in the YAML)");
  r.ignore("nebula", "braid's own checkpoints (checkpoint.async)");
  if (!r.switched_off("compile")) r.ignore("compile", "braid's kernels are compiled ahead of time");
  // DeepSpeed-Ulysses (ALST): braid's context parallelism in its ulysses mode.
  if (auto v = r.integer("sequence_parallel_size", 1, INT64_MAX); v && *v > 1) {
    cfg.parallel.context_parallel_size = *v;
    cfg.parallel.context_parallel_mode = "ulysses";
    r.note("sequence_parallel_size", "parallel.context_parallel_size = " + std::to_string(*v) +
                                         ", parallel.context_parallel_mode = ulysses");
  } else {
    r.ignore("sequence_parallel_size", "1: no sequence parallelism");
  }
  // DeepSpeed features braid does not have: absent when switched off or empty (DeepSpeed-Chat
  // writes "hybrid_engine": {"enabled": false}), "not supported yet" when on.
  for (const char* k :
       {"hybrid_engine", "elasticity", "autotuning", "compression_training", "sparse_attention",
        "curriculum_learning", "data_efficiency", "amp", "eigenvalue", "progressive_layer_drop",
        "quantize_training", "weight_quantization", "pipeline", "tensor_parallel", "domino"}) {
    const std::string key = k;
    const bool on_by_presence = key == "sparse_attention" || key == "weight_quantization" ||
                                key == "pipeline" || key == "tensor_parallel";
    if (!r.find(k) || r.switched_off(k, on_by_presence)) continue;
    if (std::string(k) == "pipeline") {
      r.ignore(k,
               "read only by DeepSpeed's PipelineModule; braid pipelines by "
               "parallel.pipeline_parallel_size");
      continue;
    }
    if (std::string(k) == "tensor_parallel") {
      if (r.integer("tensor_parallel.autotp_size", 0, INT64_MAX).value_or(1) > 1)
        r.unsupported("tensor_parallel.autotp_size",
                      "DeepSpeed's AutoTP; braid's is parallel.tensor_parallel_size in the YAML");
      r.ignore(k, "autotp_size 1");
      continue;
    }
    r.unsupported(k, "a DeepSpeed feature braid does not have");
  }
}

// Note [What "auto" keeps]: an "auto" value keeps the braid YAML's (HF Trainer fills it from
// TrainingArguments, whose part the YAML plays). These are the braid keys each DeepSpeed key that
// may say "auto" stands for, so that --print-config names the YAML line kept. (total_num_steps'
// "auto" is training.max_steps, whatever the YAML says: read_scheduler notes it.)
std::map<std::string, std::vector<std::string>> deepspeed_auto_keeps() {
  std::map<std::string, std::vector<std::string>> k = {
      {"train_batch_size", {"training.global_batch_size"}},
      {"train_micro_batch_size_per_gpu", {"training.micro_batch_size"}},
      {"gradient_accumulation_steps", {"training.gradient_accumulation_steps"}},
      {"fp16.enabled", {"training.precision"}},
      {"bf16.enabled", {"training.precision"}},
      {"bfloat16.enabled", {"training.precision"}},
      {"zero_optimization.reduce_bucket_size", {"parallel.bucket_mb"}},
      {"zero_optimization.stage3_param_persistence_threshold",
       {"parallel.param_persistence_threshold"}},
      {"optimizer.params.betas", {"optimizer.beta1", "optimizer.beta2"}},
      {"scheduler.params.warmup_num_steps", {"schedule.warmup_steps"}},
      {"scheduler.params.warmup_max_lr", {"optimizer.lr"}},
      {"scheduler.params.cos_min_ratio", {"schedule.min_lr_ratio"}},
      {"gradient_clipping", {"optimizer.grad_clip"}}};
  for (const char* f : {"loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                        "consecutive_hysteresis", "min_loss_scale"})
    k[std::string("fp16.") + f] = {std::string("fp16.") + f};
  for (const char* o : {"lr", "weight_decay", "eps", "momentum", "nesterov"})
    k[std::string("optimizer.params.") + o] = {std::string("optimizer.") + o};
  return k;
}

}  // namespace

std::vector<DialectEntry> dialect::apply_deepspeed_object(TrainConfig& cfg, const json& root,
                                                          const std::string& source,
                                                          int64_t dp_size) {
  BRAID_CHECK(root.is_object(), source, ": a DeepSpeed config must be a JSON object, got ",
              show(root));
  DialectReader r(root, source);
  r.auto_keeps(deepspeed_auto_keeps());
  dialect::add_training_arguments_hints(r);
  // DeepSpeed's data-parallel world excludes the Ulysses ranks of one sequence.
  int64_t dp = std::max<int64_t>(1, dp_size);
  if (const auto it = root.find("sequence_parallel_size");
      it != root.end() && it->is_number_integer() && it->get<int64_t>() > 1 &&
      dp % it->get<int64_t>() == 0)
    dp /= it->get<int64_t>();
  resolve_deepspeed_batch(r, cfg, dp);
  read_precision(r, cfg);
  read_zero(r, cfg);
  read_deepspeed_optimizer(r, cfg);
  read_deepspeed_scheduler(r, cfg);
  read_rest(r, cfg);
  r.reject_unknown();
  validate_training(cfg);  // the model and data are the braid YAML's
  return r.entries();
}

std::vector<DialectEntry> apply_deepspeed_config(TrainConfig& cfg, const std::string& json_text,
                                                 const std::string& source, int64_t dp_size) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::parse_error& e) {
    BRAID_THROW(source, ": not valid JSON: ", e.what());
  }
  reject_duplicate_json_keys(json_text, source);
  return dialect::apply_deepspeed_object(cfg, root, source, dp_size);
}

std::vector<DialectEntry> load_deepspeed_config(TrainConfig& cfg, const std::string& path,
                                                int64_t dp_size) {
  std::error_code ec;
  BRAID_CHECK(!std::filesystem::is_directory(path, ec), "--deepspeed: '", path,
              "' is a directory, not a JSON file");
  std::ifstream in(path);
  BRAID_CHECK(in, "--deepspeed: cannot read '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return apply_deepspeed_config(cfg, ss.str(), path, dp_size);
}

std::string describe_dialect(const std::string& source, const std::vector<DialectEntry>& entries) {
  std::string out = "# from " + source + "\n";
  std::string file = entries.empty() ? "" : entries.front().source;
  for (const auto& e : entries) {
    if (e.source != file) out += "# from " + e.source + "\n";
    file = e.source;
    out += "#   " + e.key + ": " + e.effect + "\n";
  }
  return out;
}

}  // namespace braid::config
