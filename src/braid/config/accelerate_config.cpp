#include "braid/config/accelerate_config.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "braid/config/dialect_reader.h"
#include "braid/config/duplicate_keys.h"
#include "braid/core/error.h"

namespace braid::config {

namespace {

using dialect::DialectReader;
using dialect::json;

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

void read_fsdp(DialectReader& r, TrainConfig& cfg) {
  if (!r.section("fsdp_config")) return;
  const std::string f = "fsdp_config.";
  // Accelerate writes the strategy by name, older versions by number (1 = FULL_SHARD, ...).
  // Accelerate takes the number quoted too ('1'), as its FSDP plugin does.
  static const std::vector<std::string> kStrategies = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD",
                                                       "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"};
  auto strategy = [&](const std::string& key) -> std::optional<std::string> {
    const json* v = r.find(key);
    if (v && v->is_string() && v->get<std::string>().size() == 1 &&
        v->get<std::string>()[0] >= '1' && v->get<std::string>()[0] <= '5')
      return kStrategies[static_cast<size_t>(v->get<std::string>()[0] - '1')];
    if (v && v->is_number_integer())
      return kStrategies[static_cast<size_t>(*r.integer(key, 1, 5, false) - 1)];
    return r.choice(key, kStrategies);
  };
  if (auto s = strategy(f + "fsdp_sharding_strategy")) cfg.parallel.sharding_strategy = *s;
  // FSDP2's true/false; FSDP1 configs of Accelerate >= 1.6 (TRL's fsdp1.yaml) give a strategy.
  if (const json* v = r.find(f + "fsdp_reshard_after_forward"); v && !v->is_boolean()) {
    cfg.parallel.sharding_strategy = *strategy(f + "fsdp_reshard_after_forward");
    r.note(f + "fsdp_reshard_after_forward",
           "parallel.sharding_strategy = " + cfg.parallel.sharding_strategy);
  } else if (auto b = r.boolean(f + "fsdp_reshard_after_forward")) {
    cfg.parallel.sharding_strategy = *b ? "FULL_SHARD" : "SHARD_GRAD_OP";
    r.note(f + "fsdp_reshard_after_forward",
           "parallel.sharding_strategy = " + cfg.parallel.sharding_strategy);
  }
  r.note(f + "fsdp_sharding_strategy",
         "parallel.sharding_strategy = " + cfg.parallel.sharding_strategy);
  for (const char* k : {"fsdp_backward_prefetch", "fsdp_backward_prefetch_policy"}) {
    if (auto v = r.choice(f + k, {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"})) {
      cfg.parallel.backward_prefetch = *v != "NO_PREFETCH";
      r.note(f + k, std::string("parallel.backward_prefetch = ") +
                        (cfg.parallel.backward_prefetch ? "true" : "false"));
    }
  }
  if (auto v = r.boolean(f + "fsdp_forward_prefetch")) {
    cfg.parallel.forward_prefetch = *v;
    r.note(f + "fsdp_forward_prefetch",
           std::string("parallel.forward_prefetch = ") + (*v ? "true" : "false"));
  }
  if (auto v = r.boolean(f + "fsdp_activation_checkpointing")) {
    cfg.model.activation_checkpointing = *v ? "full" : "none";
    r.note(f + "fsdp_activation_checkpointing",
           "model.activation_checkpointing = " + cfg.model.activation_checkpointing);
  }
  if (r.boolean(f + "fsdp_offload_params").value_or(false))
    r.note(f + "fsdp_offload_params",
           "ignored: braid trains on the CPU; parameters are in host memory already");
  r.ignore(f + "fsdp_offload_params", "false");
  r.choice(f + "fsdp_auto_wrap_policy", {"TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"});
  r.ignore(f + "fsdp_auto_wrap_policy",
           "braid's FSDP unit is a transformer block (and the "
           "embeddings, the head), as TRANSFORMER_BASED_WRAP");
  r.ignore(f + "fsdp_transformer_layer_cls_to_wrap", "the unit is braid's transformer block");
  r.ignore(f + "fsdp_min_num_params", "units are blocks, not sizes");
  r.choice(f + "fsdp_state_dict_type",
           {"FULL_STATE_DICT", "SHARDED_STATE_DICT", "LOCAL_STATE_DICT"});
  r.ignore(f + "fsdp_state_dict_type",
           "braid's checkpoints are sharded and reshard on load; its export is the full model");
  r.ignore(f + "fsdp_sync_module_states", "every rank initialises the same weights");
  r.ignore(f + "fsdp_use_orig_params", "parameters keep their names and shapes");
  r.ignore(f + "fsdp_cpu_ram_efficient_loading", "each rank loads only what it holds");
  r.integer(f + "fsdp_version", 1, 2, false);
  r.ignore(f + "fsdp_version", "the same sharding either way");
  r.ignore(f + "fsdp_float8_all_gather", "braid has no fp8");
  if (const json* v = r.find(f + "fsdp_ignored_modules");
      v && !(v->is_array() && v->empty()) && !(v->is_string() && v->get<std::string>().empty()))
    r.unsupported(f + "fsdp_ignored_modules", "every module is sharded by its unit");
  r.ignore(f + "fsdp_ignored_modules", "empty");
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

// Accelerate's parallelism_config (1.10+; TRL's context-parallel and ALST recipes): the tensor
// parallel size is braid's; cp_size (torch's ring attention) is braid's context parallelism in
// its ring mode and sp_size (ALST, DeepSpeed-Ulysses) in its ulysses mode.
void read_parallelism(DialectReader& r, TrainConfig& cfg) {
  if (!r.section("parallelism_config") || r.switched_off("parallelism_config", true)) return;
  const std::string p = "parallelism_config.parallelism_config_";
  if (auto v = r.integer(p + "tp_size", 1, INT32_MAX, false)) {
    cfg.parallel.tensor_parallel_size = *v;
    r.note(p + "tp_size", "parallel.tensor_parallel_size = " + std::to_string(*v));
  }
  const int64_t cp = r.integer(p + "cp_size", 1, INT32_MAX, false).value_or(1);
  const int64_t sp = r.integer(p + "sp_size", 1, INT32_MAX, false).value_or(1);
  if (cp > 1 && sp > 1)
    r.unsupported(p + "sp_size",
                  "sequence parallelism beside context parallelism (braid splits a sequence over "
                  "one dimension: cp_size for ring attention or sp_size for Ulysses)");
  if (cp > 1 || sp > 1) {
    cfg.parallel.context_parallel_size = std::max(cp, sp);
    cfg.parallel.context_parallel_mode = cp > 1 ? "ring" : "ulysses";
    r.note(p + (cp > 1 ? "cp_size" : "sp_size"),
           "parallel.context_parallel_size = " + std::to_string(std::max(cp, sp)) +
               ", parallel.context_parallel_mode = " + cfg.parallel.context_parallel_mode);
  }
  if (cp == 1) r.ignore(p + "cp_size", "1: no context parallelism");
  if (sp == 1) r.ignore(p + "sp_size", "1: no sequence parallelism");
  const auto replicate = r.integer(p + "dp_replicate_size", 1, INT32_MAX, false);
  const auto shard = r.integer(p + "dp_shard_size", 1, INT32_MAX, false);
  if (replicate.value_or(1) > 1 && shard.value_or(1) > 1) {
    cfg.parallel.sharding_factor = *shard;  // HSDP: shard within groups, replicate across
    r.note(p + "dp_shard_size", "parallel.sharding_factor = " + std::to_string(*shard));
  }
  r.ignore(p + "dp_replicate_size", "the data-parallel size is the ranks over tp x cp");
  r.ignore(p + "dp_shard_size", "the data-parallel size is the ranks over tp x cp");
  r.ignore(p + "cp_backend", "braid's ring attention is its own");
  r.ignore(p + "cp_comm_strategy",
           "braid's ring passes key/value blocks to the next rank, overlapped with compute");
  r.ignore(p + "sp_backend", "braid's Ulysses is its own");
  r.ignore(p + "sp_attn_implementation", "braid's attention kernel is its own");
  for (const char* k : {"sp_seq_length", "sp_seq_length_is_variable"})
    r.ignore(p + k, "the sequence length is data.seq_len");
}

// Accelerate's deepspeed_config block: a DeepSpeed config file, or plugin keys that Accelerate
// turns into one (zero_stage, offload devices, accumulation, clipping); applied as DeepSpeed's.
std::vector<DialectEntry> read_deepspeed(DialectReader& r, TrainConfig& cfg, const json& root,
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
    return dialect::apply_deepspeed_object(cfg, ds, path, dp);
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
  const json* stage = plugin("zero_stage");
  ds["zero_optimization"] = {{"stage", stage ? *stage : json(2)}};  // Accelerate's default 2
  if (const json* v = plugin("offload_optimizer_device"))
    ds["zero_optimization"]["offload_optimizer"]["device"] = *v;
  if (const json* v = plugin("offload_optimizer_nvme_path"))
    ds["zero_optimization"]["offload_optimizer"]["nvme_path"] = *v;
  if (const json* v = plugin("offload_param_device"))
    ds["zero_optimization"]["offload_param"]["device"] = *v;
  if (const json* v = plugin("offload_param_nvme_path"))
    ds["zero_optimization"]["offload_param"]["nvme_path"] = *v;
  ds["gradient_accumulation_steps"] = "auto";
  if (const json* v = plugin("gradient_accumulation_steps")) ds["gradient_accumulation_steps"] = *v;
  if (const json* v = plugin("gradient_clipping")) ds["gradient_clipping"] = *v;
  if (precision == "fp16") ds["fp16"] = {{"enabled", true}};
  if (precision == "bf16") ds["bf16"] = {{"enabled", true}};
  auto entries = dialect::apply_deepspeed_object(cfg, ds, "deepspeed_config", dp);
  for (auto& e : entries) e.key = d + e.key;
  return entries;
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
  const bool has_deepspeed = other_type_block("deepspeed_config", "DEEPSPEED");
  const bool has_fsdp = other_type_block("fsdp_config", "FSDP");
  other_type_block("megatron_lm_config", "MEGATRON_LM");
  (void)has_deepspeed;
  if (type != "NO" && type != "MULTI_CPU" && type != "MULTI_GPU" && type != "FSDP" &&
      type != "DEEPSPEED")
    r.unsupported("distributed_type", type +
                                          "; braid has NO, MULTI_CPU, MULTI_GPU (as "
                                          "MULTI_CPU), FSDP and DEEPSPEED");
  const auto procs = r.integer("num_processes", 1, INT32_MAX, false);
  if (type == "NO" && root.contains("distributed_type") && procs.value_or(1) > 1)
    r.fail("distributed_type", "NO with num_processes " + std::to_string(*procs) +
                                   "; choose MULTI_CPU, FSDP or DEEPSPEED");
  std::string precision = cfg.training.precision;
  if (auto v = r.choice("mixed_precision", {"no", "fp16", "bf16", "fp8"})) {
    if (*v == "fp8") r.unsupported("mixed_precision", "fp8; braid has fp16 and bf16");
    precision = *v == "no" ? "fp32" : *v;
  }
  // The sequence split first: DeepSpeed's batch arithmetic runs over the data-parallel ranks,
  // which exclude the cp / sp ranks of one sequence.
  const int64_t cp_before = cfg.parallel.context_parallel_size;
  read_parallelism(r, cfg);
  if (cfg.parallel.context_parallel_size != cp_before &&
      dp_size % cfg.parallel.context_parallel_size == 0)
    dp_size = dp_size * cp_before / cfg.parallel.context_parallel_size;
  std::vector<DialectEntry> deepspeed;
  if (type == "DEEPSPEED") {
    // mixed_precision holds under DeepSpeed too ('no': fp32, whatever the YAML says); a
    // deepspeed_config_file's explicit fp16/bf16 replace it, its "auto" keeps it.
    cfg.training.precision = precision;
    if (r.find("mixed_precision"))
      r.note("mixed_precision", "training.precision = " + cfg.training.precision);
    deepspeed = read_deepspeed(r, cfg, root, precision, dp_size);
  } else {
    cfg.training.precision = precision;
    cfg.parallel.strategy = type == "NO" ? "none" : type == "FSDP" ? "fsdp" : "ddp";
    r.note("distributed_type", "parallel.strategy = " + cfg.parallel.strategy +
                                   (type == "MULTI_GPU" ? " (braid trains on the CPU)" : ""));
    if (r.find("mixed_precision"))
      r.note("mixed_precision", "training.precision = " + cfg.training.precision);
  }
  if (has_fsdp) read_fsdp(r, cfg);
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
  auto entries = r.entries();
  entries.insert(entries.end(), deepspeed.begin(), deepspeed.end());
  validate_training(cfg);  // the model and data are the braid YAML's
  return entries;
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
