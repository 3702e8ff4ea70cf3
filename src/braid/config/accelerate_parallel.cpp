// The fsdp_config and parallelism_config blocks of an Accelerate config
// (accelerate_sections.h).
#include <string>

#include "braid/config/accelerate_sections.h"

namespace braid::config::dialect {

// FSDP's keys, with Accelerate's defaults for those the file leaves out (fsdp_config may be
// absent or empty: `accelerate launch` fills its FSDP arguments either way). Note [Accelerate's
// defaults] says where each comes from.
void read_accelerate_fsdp(DialectReader& r, TrainConfig& cfg) {
  r.section("fsdp_config");
  const std::string f = "fsdp_config.";
  const int64_t version = r.integer(f + "fsdp_version", 1, 2, false).value_or(1);
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
  const auto given = strategy(f + "fsdp_sharding_strategy");
  if (given) {
    cfg.parallel.sharding_strategy = *given;
    r.note(f + "fsdp_sharding_strategy", "parallel.sharding_strategy = " + *given);
  }
  // FSDP2's true/false; FSDP1 configs of Accelerate >= 1.6 (TRL's fsdp1.yaml) give a strategy.
  const json* reshard = r.find(f + "fsdp_reshard_after_forward");
  if (reshard && !reshard->is_boolean()) {
    cfg.parallel.sharding_strategy = *strategy(f + "fsdp_reshard_after_forward");
    r.note(f + "fsdp_reshard_after_forward",
           "parallel.sharding_strategy = " + cfg.parallel.sharding_strategy);
  } else if (auto b = r.boolean(f + "fsdp_reshard_after_forward")) {
    cfg.parallel.sharding_strategy = *b ? "FULL_SHARD" : "SHARD_GRAD_OP";
    r.note(f + "fsdp_reshard_after_forward",
           "parallel.sharding_strategy = " + cfg.parallel.sharding_strategy);
  }
  if (!given && !reshard) {  // FSDP1's FULL_SHARD, FSDP2's reshard_after_forward true
    cfg.parallel.sharding_strategy = "FULL_SHARD";
    r.defaulted(f + (version == 2 ? "fsdp_reshard_after_forward" : "fsdp_sharding_strategy"),
                "parallel.sharding_strategy = FULL_SHARD");
  }
  auto said = [](const char* key, bool v) {
    return std::string(key) + (v ? " = true" : " = false");
  };
  if (version == 2) {
    // Accelerate reads neither prefetch key for FSDP2 (it sets backward_prefetch to None with a
    // warning, and reads forward_prefetch for FSDP1 only); FSDP2's own prefetching holds.
    for (const char* k :
         {"fsdp_backward_prefetch", "fsdp_backward_prefetch_policy", "fsdp_forward_prefetch"})
      r.ignore(f + k, "Accelerate does not read it for fsdp_version 2 (FSDP2 prefetches itself)");
    cfg.parallel.backward_prefetch = true;
    cfg.parallel.forward_prefetch = false;
    r.note(f + "fsdp_version", said("parallel.backward_prefetch", true) + ", " +
                                   said("parallel.forward_prefetch", false) +
                                   " (FSDP2's own prefetching: the next module in backward, "
                                   "none explicit in forward)");
  } else {
    r.ignore(f + "fsdp_version", "FSDP1: the prefetch keys hold, the same sharding");
    bool backward_given = false;
    for (const char* k : {"fsdp_backward_prefetch", "fsdp_backward_prefetch_policy"}) {
      if (auto v = r.choice(f + k, {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"})) {
        cfg.parallel.backward_prefetch = *v != "NO_PREFETCH";
        r.note(f + k, said("parallel.backward_prefetch", cfg.parallel.backward_prefetch));
        backward_given = true;
      }
    }
    if (!backward_given) {
      cfg.parallel.backward_prefetch = false;  // NO_PREFETCH
      r.defaulted(f + "fsdp_backward_prefetch", said("parallel.backward_prefetch", false));
    }
    const auto forward = r.boolean(f + "fsdp_forward_prefetch");
    cfg.parallel.forward_prefetch = forward.value_or(false);
    if (forward)
      r.note(f + "fsdp_forward_prefetch", said("parallel.forward_prefetch", *forward));
    else
      r.defaulted(f + "fsdp_forward_prefetch", said("parallel.forward_prefetch", false));
  }
  if (auto v = r.boolean(f + "fsdp_activation_checkpointing")) {
    cfg.model.activation_checkpointing = *v ? "full" : "none";
    r.note(f + "fsdp_activation_checkpointing",
           "model.activation_checkpointing = " + cfg.model.activation_checkpointing);
  }
  // FSDP offloads to host memory or not at all: braid's state is in host memory already, and
  // FSDP has no file offload, so neither of braid's nvme offloads applies, whatever the YAML says.
  cfg.parallel.offload_params = "none";
  cfg.parallel.offload_optimizer = "none";
  const std::string no_offload =
      "parallel.offload_params = none, parallel.offload_optimizer = none";
  if (const auto v = r.boolean(f + "fsdp_offload_params"))
    r.note(f + "fsdp_offload_params",
           no_offload +
               (*v ? " (braid trains on the CPU; parameters are in host memory already)" : ""));
  else
    r.defaulted(f + "fsdp_offload_params", no_offload);
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
  r.ignore(f + "fsdp_float8_all_gather", "braid has no fp8");
  if (const json* v = r.find(f + "fsdp_ignored_modules");
      v && !(v->is_array() && v->empty()) && !(v->is_string() && v->get<std::string>().empty()))
    r.unsupported(f + "fsdp_ignored_modules", "every module is sharded by its unit");
  r.ignore(f + "fsdp_ignored_modules", "empty");
}

// Accelerate's parallelism_config (1.10+; TRL's context-parallel and ALST recipes): the tensor
// parallel size is braid's; cp_size (torch's ring attention) is braid's context parallelism in
// its ring mode and sp_size (ALST, DeepSpeed-Ulysses) in its ulysses mode.
void read_accelerate_parallelism(DialectReader& r, TrainConfig& cfg) {
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

}  // namespace braid::config::dialect
