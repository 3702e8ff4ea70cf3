#include "braid/config/accelerate_config.h"
#include "braid/config/accelerate_sections.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "braid/config/dialect_reader.h"
#include "braid/config/duplicate_keys.h"
#include "braid/core/error.h"

namespace braid::config {

namespace {

using dialect::DialectReader;
using dialect::json;

// Note [Accelerate's defaults]: a key the file leaves out means what `accelerate launch` makes of
// it (accelerate 1.x: commands/launch.py, utils/launch.py, utils/dataclasses.py), not the braid
// YAML's value: the launcher turns every config into environment variables, filling its own
// defaults, and the plugins read those.
// - mixed_precision: 'no'. config_args.py BaseConfig.process_config leaves it None and
//   launch.py _validate_launch_command makes None 'no', which every launcher exports as
//   ACCELERATE_MIXED_PRECISION; fp32 under every distributed_type, DEEPSPEED included.
// - deepspeed_config (no deepspeed_config_file), DeepSpeedPlugin.__post_init__: zero_stage 2
//   (ACCELERATE_DEEPSPEED_ZERO_STAGE's default), offload_optimizer_device and
//   offload_param_device "none"; gradient_accumulation_steps and gradient_clipping "auto"
//   (their environment defaults), which HF Trainer fills from TrainingArguments, the YAML's part
//   here. (A bare Accelerator fills gradient_clipping 1.0 in Accelerator._prepare_deepspeed;
//   braid follows the Trainer, as for every "auto".) The batch sizes are "auto" too.
// - gradient accumulation outside DeepSpeed is the script's (Accelerator's
//   gradient_accumulation_steps argument, default 1): the YAML's.
// - fsdp_config, FullyShardedDataParallelPlugin.__post_init__ with launch.py's argument defaults
//   (--fsdp_sharding_strategy FULL_SHARD, --fsdp_reshard_after_forward true,
//   --fsdp_forward_prefetch false, --fsdp_offload_params false, no --fsdp_backward_prefetch):
//   FULL_SHARD; no backward prefetch (FSDP_BACKWARD_PREFETCH unset is None, which Accelerator
//   passes to FSDP as backward_prefetch=None); no forward prefetch; no offload. For
//   fsdp_version 2 Accelerate reads neither prefetch key (backward_prefetch is set to None with a
//   warning, forward_prefetch is read for FSDP1 only), so FSDP2's own behaviour holds: it
//   prefetches the next module's all-gather in backward (torch's FSDPParamGroup
//   ._backward_prefetch, in reverse post-forward order) and only implicitly, through CUDA
//   streams, in forward (torch's FSDP notes), which braid counts as no forward prefetch.

// YAML as JSON values: plain true/false as booleans, plain integers and decimals as numbers,
// null/~ as null, everything else (quoted or not) a string. YAML 1.1's yes/no/on/off stay
// strings: Accelerate writes mixed_precision: 'no'.
json to_json(const YAML::Node& n) {
  if (n.IsMap()) {
    json j = json::object();
    for (auto it = n.begin(); it != n.end(); ++it)
      j[it->first.as<std::string>()] = to_json(it->second);
    return j;
  }
  if (n.IsSequence()) {
    json j = json::array();
    for (const auto& e : n) j.push_back(to_json(e));
    return j;
  }
  if (!n.IsScalar()) return nullptr;
  const std::string s = n.Scalar();
  if (n.Tag() == "!") return s;  // quoted
  if (s == "null" || s == "~" || s.empty()) return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  try {
    size_t used = 0;
    const long long i = std::stoll(s, &used);
    if (used == s.size()) return i;
    const double d = std::stod(s, &used);
    if (used == s.size()) return d;
  } catch (const std::exception&) {
  }
  return s;
}

json parse_yaml(const std::string& text, const std::string& source) {
  try {
    YAML::Node root = YAML::Load(text);
    reject_duplicate_keys(root, source);
    json j = to_json(root);
    BRAID_CHECK(j.is_object(), source, ": an Accelerate config must be a YAML mapping, got ",
                dialect::show(j));
    return j;
  } catch (const YAML::Exception& e) {
    BRAID_THROW(source, ": not valid YAML: ", e.what());
  }
}

std::string read_file(const std::string& path, const char* what) {
  std::error_code ec;
  BRAID_CHECK(!std::filesystem::is_directory(path, ec), what, ": '", path,
              "' is a directory, not a file");
  std::ifstream in(path);
  BRAID_CHECK(in, what, ": cannot read '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The keys of the blocks a file's distributed_type does not read, for "did you mean" (a top-level
// fsdp_sharding_strategy means fsdp_config.fsdp_sharding_strategy).
const std::vector<std::string>& block_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (const char* f :
         {"fsdp_sharding_strategy", "fsdp_reshard_after_forward", "fsdp_backward_prefetch",
          "fsdp_forward_prefetch", "fsdp_activation_checkpointing", "fsdp_offload_params",
          "fsdp_auto_wrap_policy", "fsdp_transformer_layer_cls_to_wrap", "fsdp_min_num_params",
          "fsdp_state_dict_type", "fsdp_sync_module_states", "fsdp_use_orig_params",
          "fsdp_cpu_ram_efficient_loading", "fsdp_version"})
      k.push_back(std::string("fsdp_config.") + f);
    for (const char* d :
         {"zero_stage", "offload_optimizer_device", "offload_param_device", "zero3_init_flag",
          "zero3_save_16bit_model", "deepspeed_config_file", "deepspeed_multinode_launcher"})
      k.push_back(std::string("deepspeed_config.") + d);
    for (const char* p :
         {"parallelism_config_tp_size", "parallelism_config_cp_size",
          "parallelism_config_dp_shard_size", "parallelism_config_dp_replicate_size"})
      k.push_back(std::string("parallelism_config.") + p);
    return k;
  }();
  return keys;
}

// The DeepSpeed keys Accelerate's DeepSpeedPlugin writes from the deepspeed_config block's keys
// (utils/dataclasses.py, DeepSpeedPlugin.__post_init__), so that what they set is said of the
// file's key.
const std::map<std::string, std::string>& plugin_keys() {
  static const std::map<std::string, std::string> keys = {
      {"zero_optimization.stage", "zero_stage"},
      {"zero_optimization.offload_optimizer.device", "offload_optimizer_device"},
      {"zero_optimization.offload_optimizer.nvme_path", "offload_optimizer_nvme_path"},
      {"zero_optimization.offload_param.device", "offload_param_device"},
      {"zero_optimization.offload_param.nvme_path", "offload_param_nvme_path"},
      {"gradient_accumulation_steps", "gradient_accumulation_steps"},
      {"gradient_clipping", "gradient_clipping"}};
  return keys;
}

// Accelerate's deepspeed_config block: a DeepSpeed config file, or plugin keys that Accelerate
// turns into one (zero_stage, offload devices, accumulation, clipping); applied as DeepSpeed's,
// its entries added to r's where they applied.
void read_deepspeed(DialectReader& r, TrainConfig& cfg, const json& root, const std::string& source,
                    const std::string& precision, int64_t dp) {
  r.section("deepspeed_config");
  const std::string d = "deepspeed_config.";
  static const std::vector<std::string> kPlugin = {"zero_stage",
                                                   "offload_optimizer_device",
                                                   "offload_param_device",
                                                   "offload_optimizer_nvme_path",
                                                   "offload_param_nvme_path",
                                                   "gradient_accumulation_steps",
                                                   "gradient_clipping"};
  r.ignore(d + "zero3_init_flag", "ZeRO-3 parameters are born sharded in braid anyway");
  r.ignore(d + "zero3_save_16bit_model", "braid's export always gathers the whole weights");
  r.ignore(d + "deepspeed_multinode_launcher", "braid launches through mpirun");
  r.ignore(d + "deepspeed_hostfile", "give braid launch --hostfile");
  for (const char* k : {"deepspeed_exclusion_filter", "deepspeed_inclusion_filter"})
    r.ignore(d + k, "give braid launch --hostfile");
  r.ignore(d + "deepspeed_moe_layer_cls_names", "braid's models have no mixture of experts");
  // A DeepSpeed JSON key put in the plugin block (TRL's ALST recipe): Accelerate does not read it.
  r.ignore(d + "seq_parallel_communication_data_type",
           "a DeepSpeed JSON key that Accelerate does not read here (and for sequence "
           "parallelism only)");
  if (const json* file = r.find(d + "deepspeed_config_file")) {
    if (!file->is_string()) r.fail(d + "deepspeed_config_file", "must be a path");
    for (const auto& k : kPlugin)
      if (r.find(d + k))
        r.fail(d + k,
               "is set in deepspeed_config_file's config when that is given (Accelerate "
               "ignores it there); remove one");
    const std::string path = file->get<std::string>();
    std::ifstream probe(path);
    if (!probe) {
      std::error_code ec;
      const auto cwd = std::filesystem::current_path(ec).string();
      r.fail(d + "deepspeed_config_file",
             "cannot read '" + path + "'" +
                 (std::filesystem::path(path).is_relative()
                      ? " (a relative path is taken from the current directory, " + cwd +
                            ", as Accelerate does)"
                      : ""));
    }
    const std::string text = read_file(path, (d + "deepspeed_config_file").c_str());
    json ds;
    try {
      ds = json::parse(text);
    } catch (const json::parse_error& e) {
      BRAID_THROW(path, ": not valid JSON: ", e.what());
    }
    reject_duplicate_json_keys(text, path);
    r.note(d + "deepspeed_config_file", "read as DeepSpeed's config (below)");
    r.append(dialect::apply_deepspeed_object(cfg, ds, path, dp));
    return;
  }
  // The plugin keys, as Accelerate's DeepSpeedPlugin fills its config.
  json ds = {{"train_micro_batch_size_per_gpu", "auto"}, {"train_batch_size", "auto"}};
  const json* block = root.contains("deepspeed_config") ? &root["deepspeed_config"] : nullptr;
  auto plugin = [&](const std::string& key) -> const json* {
    r.find(d + key);  // known
    return block && block->contains(key) ? &(*block)[key] : nullptr;
  };
  // The typed plugin keys, checked under their own names.
  r.integer(d + "zero_stage", 0, 3, false);
  r.choice(d + "offload_optimizer_device", {"none", "cpu", "nvme"});
  r.choice(d + "offload_param_device", {"none", "cpu", "nvme"});
  r.integer(d + "gradient_accumulation_steps", 1, INT32_MAX);
  r.number(d + "gradient_clipping", 0, 1e30);
  // Accelerate's defaults for the keys left out (Note [Accelerate's defaults]).
  auto value_or = [&](const std::string& key, const json& fallback) {
    const json* v = plugin(key);
    return v ? *v : fallback;
  };
  ds["zero_optimization"] = {{"stage", value_or("zero_stage", 2)}};
  ds["zero_optimization"]["offload_optimizer"]["device"] =
      value_or("offload_optimizer_device", "none");
  if (const json* v = plugin("offload_optimizer_nvme_path"))
    ds["zero_optimization"]["offload_optimizer"]["nvme_path"] = *v;
  ds["zero_optimization"]["offload_param"]["device"] = value_or("offload_param_device", "none");
  if (const json* v = plugin("offload_param_nvme_path"))
    ds["zero_optimization"]["offload_param"]["nvme_path"] = *v;
  ds["gradient_accumulation_steps"] = value_or("gradient_accumulation_steps", "auto");
  ds["gradient_clipping"] = value_or("gradient_clipping", "auto");
  if (precision == "fp16") ds["fp16"] = {{"enabled", true}};
  if (precision == "bf16") ds["bf16"] = {{"enabled", true}};
  auto entries = dialect::apply_deepspeed_object(cfg, ds, "deepspeed_config", dp);
  // Said of the file's keys: a plugin key's or Accelerate's own "auto"s. The fp16 / bf16 blocks
  // are mixed_precision's, noted already.
  std::erase_if(entries, [](const DialectEntry& e) {
    return e.key == "fp16.enabled" || e.key == "bf16.enabled";
  });
  for (auto& e : entries) {
    e.source = source;
    const auto from = plugin_keys().find(e.key);
    if (from != plugin_keys().end()) {
      const std::string key = d + from->second;
      const bool absent = !plugin(from->second);
      if (absent && e.how == DialectEntry::How::given) {
        e.how = DialectEntry::How::defaulted;
        e.effect = "absent: Accelerate's default, " + e.effect;
        e.origin = "no " + key + ": Accelerate's default";
      } else if (absent && e.how == DialectEntry::How::kept) {
        e.origin = "no " + key + ": Accelerate's \"auto\", the YAML's value";
      } else if (e.how == DialectEntry::How::given) {
        e.origin = key;
      }
      e.key = key;
    } else if (e.how == DialectEntry::How::kept) {
      e.origin = "Accelerate's " + e.key + " \"auto\": the YAML's value";
      e.key = d + e.key;
    } else {
      // The fp16 block Accelerate writes for mixed_precision fp16 has DeepSpeed's loss scaling.
      if (e.how == DialectEntry::How::defaulted && e.key.rfind("fp16.", 0) == 0)
        e.origin = "mixed_precision fp16: DeepSpeed's default " + e.key;
      e.key = d + e.key;
    }
  }
  r.append(entries);
}

}  // namespace

std::vector<DialectEntry> apply_accelerate_config(TrainConfig& cfg, const std::string& yaml_text,
                                                  const std::string& source, int64_t dp_size) {
  const json root = parse_yaml(yaml_text, source);
  DialectReader r(root, source, "Accelerate");
  dialect::add_training_arguments_hints(r);
  r.also_known(block_keys());
  const std::string env = r.choice("compute_environment", {"LOCAL_MACHINE", "AMAZON_SAGEMAKER"})
                              .value_or("LOCAL_MACHINE");
  if (env != "LOCAL_MACHINE") r.unsupported("compute_environment", "SageMaker");
  const std::string type = r.choice("distributed_type", {"NO", "MULTI_CPU", "MULTI_GPU", "FSDP",
                                                         "DEEPSPEED", "MEGATRON_LM", "MULTI_XPU",
                                                         "MULTI_NPU", "MULTI_MLU", "XLA", "TPU"})
                               .value_or("NO");
  // Blocks that are empty are absent (older `accelerate config` writes deepspeed_config: {},
  // fsdp_config: {}, megatron_lm_config: {} whatever the type); a filled one for another type is
  // what Accelerate does with it: not read.
  auto other_type_block = [&](const char* key, const char* its_type) {
    if (!r.section(key) || r.switched_off(key, true)) return false;
    if (type == its_type) return true;
    r.note(key, std::string("ignored: distributed_type is ") + type + ", not " + its_type +
                    " (Accelerate reads it only then)");
    return false;
  };
  other_type_block("deepspeed_config", "DEEPSPEED");
  other_type_block("fsdp_config", "FSDP");
  other_type_block("megatron_lm_config", "MEGATRON_LM");
  if (type != "NO" && type != "MULTI_CPU" && type != "MULTI_GPU" && type != "FSDP" &&
      type != "DEEPSPEED")
    r.unsupported("distributed_type", type +
                                          "; braid has NO, MULTI_CPU, MULTI_GPU (as "
                                          "MULTI_CPU), FSDP and DEEPSPEED");
  const auto procs = r.integer("num_processes", 1, INT32_MAX, false);
  if (type == "NO" && root.contains("distributed_type") && procs.value_or(1) > 1)
    r.fail("distributed_type", "NO with num_processes " + std::to_string(*procs) +
                                   "; choose MULTI_CPU, FSDP or DEEPSPEED");
  // Absent, Accelerate's 'no' (Note [Accelerate's defaults]).
  std::string precision = "fp32";
  const auto mixed = r.choice("mixed_precision", {"no", "fp16", "bf16", "fp8"});
  if (mixed) {
    if (*mixed == "fp8") r.unsupported("mixed_precision", "fp8; braid has fp16 and bf16");
    precision = *mixed == "no" ? "fp32" : *mixed;
  }
  auto note_precision = [&] {
    if (mixed)
      r.note("mixed_precision", "training.precision = " + cfg.training.precision);
    else
      r.defaulted("mixed_precision", "training.precision = fp32 ('no')");
  };
  // The sequence split first: DeepSpeed's batch arithmetic runs over the data-parallel ranks,
  // which exclude the cp / sp ranks of one sequence.
  const int64_t cp_before = cfg.parallel.context_parallel_size;
  read_accelerate_parallelism(r, cfg);
  if (cfg.parallel.context_parallel_size != cp_before &&
      dp_size % cfg.parallel.context_parallel_size == 0)
    dp_size = dp_size * cp_before / cfg.parallel.context_parallel_size;
  if (type == "DEEPSPEED") {
    // mixed_precision holds under DeepSpeed too ('no': fp32, whatever the YAML says); a
    // deepspeed_config_file's explicit fp16/bf16 replace it, its "auto" keeps it.
    cfg.training.precision = precision;
    note_precision();
    read_deepspeed(r, cfg, root, source, precision, dp_size);
  } else {
    cfg.training.precision = precision;
    cfg.parallel.strategy = type == "NO" ? "none" : type == "FSDP" ? "fsdp" : "ddp";
    r.note("distributed_type", "parallel.strategy = " + cfg.parallel.strategy +
                                   (type == "MULTI_GPU" ? " (braid trains on the CPU)" : ""));
    note_precision();
  }
  if (type == "FSDP") read_accelerate_fsdp(r, cfg);  // with or without an fsdp_config block
  // Accelerate 1.4-1.6's tensor parallelism.
  if (r.section("tp_config") && !r.switched_off("tp_config", true))
    if (auto v = r.integer("tp_config.tp_size", 1, INT32_MAX, false)) {
      cfg.parallel.tensor_parallel_size = *v;
      r.note("tp_config.tp_size", "parallel.tensor_parallel_size = " + std::to_string(*v));
    }
  if (auto v = r.integer("gradient_accumulation_steps", 1, INT32_MAX, false)) {
    cfg.training.gradient_accumulation_steps = *v;
    r.note("gradient_accumulation_steps",
           "training.gradient_accumulation_steps = " + std::to_string(*v));
  }
  if (auto v = r.boolean("debug", false)) {
    cfg.parallel.comm_debug = *v;
    r.note("debug", std::string("parallel.comm_debug = ") + (*v ? "true" : "false"));
  }
  // Launch keys: braid launch --config_file reads them.
  r.integer("num_machines", 1, INT32_MAX, false);
  r.integer("machine_rank", 0, INT32_MAX, false);
  r.integer("main_process_port", 0, 65535, false);
  for (const char* k : {"num_processes", "num_machines", "machine_rank"})
    r.ignore(k, "for the launcher (braid launch --config_file)");
  for (const char* k : {"main_process_ip", "main_process_port", "rdzv_backend", "same_network"})
    r.ignore(k, "braid's ranks meet through mpirun (braid launch --hostfile)");
  r.boolean("use_cpu", false);
  r.ignore("use_cpu", "braid trains on the CPU");
  for (const char* k : {"gpu_ids", "downcast_bf16", "enable_cpu_affinity", "main_training_function",
                        "commands", "command_file"})
    r.ignore(k, "no effect in braid");
  for (const char* k :
       {"tpu_env", "tpu_use_cluster", "tpu_use_sudo", "tpu_name", "tpu_zone", "tpu_vm"})
    r.ignore(k, "for TPU pods (distributed_type XLA/TPU)");
  // torch.compile changes the speed, not the result; braid's kernels are compiled already.
  for (const char* k : {"dynamo_backend", "dynamo_config"})
    r.ignore(k, "torch.compile (TorchDynamo); braid's kernels are compiled ahead of time");
  r.ignore("ipex_config", "Intel Extension for PyTorch; braid's CPU kernels are its own");
  r.ignore("mpirun_config", "give braid launch --hostfile (braid always launches through mpirun)");
  r.ignore("fp8_config", "mixed_precision is not fp8");
  r.reject_unknown();
  if (!root.contains("distributed_type"))
    r.fail("distributed_type",
           "missing (Accelerate needs it too: NO, MULTI_CPU, MULTI_GPU, FSDP or DEEPSPEED)");
  validate_training(cfg);  // the model and data are the braid YAML's
  return r.entries();
}

std::vector<DialectEntry> load_accelerate_config(TrainConfig& cfg, const std::string& path,
                                                 int64_t dp_size) {
  return apply_accelerate_config(cfg, read_file(path, "Accelerate config"), path, dp_size);
}

AccelerateLaunch accelerate_launch_settings(const std::string& path) {
  const json root = parse_yaml(read_file(path, "--config_file"), path);
  AccelerateLaunch a;
  auto count = [&](const char* key, int lo) -> int {
    if (!root.contains(key)) return 0;
    const json& v = root[key];
    BRAID_CHECK(v.is_number_integer() && v.get<int64_t>() >= lo && v.get<int64_t>() <= INT32_MAX,
                path, ": ", key, ": must be an integer >= ", lo, ", got ", dialect::show(v));
    return static_cast<int>(v.get<int64_t>());
  };
  a.num_processes = count("num_processes", 1);
  a.num_machines = std::max(1, count("num_machines", 1));
  return a;
}

}  // namespace braid::config
