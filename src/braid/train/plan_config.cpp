#include "braid/train/plan_config.h"

#include <algorithm>
#include <functional>
#include <sstream>

#include "braid/core/error.h"
#include "braid/core/memory_tracker.h"
#include "braid/core/tensor.h"
#include "braid/launch/threads.h"
#include "braid/parallel/pipeline/schedule.h"

namespace braid::train {

parallel::ParallelPlan parallel_plan_from(const config::TrainConfig& cfg) {
  const auto& p = cfg.parallel;
  parallel::ParallelPlan s;
  s.name = p.strategy;
  s.sharding_strategy = p.sharding_strategy;
  s.sharding_factor = static_cast<int>(p.sharding_factor);
  s.tensor_parallel_size = static_cast<int>(p.tensor_parallel_size);
  s.sequence_parallel = p.sequence_parallel;
  s.context_parallel_size = static_cast<int>(p.context_parallel_size);
  s.context_parallel_mode = p.context_parallel_mode;
  s.pipeline_parallel_size = static_cast<int>(p.pipeline_parallel_size);
  s.pipeline_schedule = p.pipeline_schedule;
  s.pipeline_virtual_stages = parallel::pipeline::chunks_per_rank(
      p.pipeline_schedule, static_cast<int>(p.pipeline_virtual_stages));
  s.pipeline_balance = p.pipeline_balance;
  s.pipeline_trace = p.pipeline_trace;
  s.micro_batch_size = std::max<int64_t>(1, cfg.training.micro_batch_size);
  s.seq_len = cfg.data.seq_len;
  s.bucket_mb = p.bucket_mb;
  s.find_unused_parameters = p.find_unused_parameters;
  s.reduce_dtype = cfg.reduce_dtype();
  s.sync_each_batch = p.sync_each_batch;
  s.forward_prefetch = p.forward_prefetch;
  s.backward_prefetch = p.backward_prefetch;
  s.limit_all_gathers = static_cast<int>(p.limit_all_gathers);
  s.param_persistence_threshold = p.param_persistence_threshold;
  // Per-unit policies: comma-separated unit names.
  auto each_unit = [](const std::string& list, const std::function<void(const std::string&)>& fn) {
    std::stringstream in(list);
    for (std::string name; std::getline(in, name, ',');) {
      name.erase(0, name.find_first_not_of(' '));
      name.erase(name.find_last_not_of(' ') + 1);
      if (!name.empty()) fn(name);
    }
  };
  each_unit(p.unsharded_units,
            [&](const std::string& u) { s.unit_policies[u].shard_parameters = false; });
  each_unit(p.keep_gathered_units,
            [&](const std::string& u) { s.unit_policies[u].reshard_after_forward = false; });
  s.ranks_per_node = launch::local_world_size();
  s.offload_optimizer = p.offload_optimizer;
  s.offload_params = p.offload_params;
  s.offload_dir = offload_dir_from(cfg);
  return s;
}

parallel::cost::Layout layout_from(const config::TrainConfig& cfg) {
  const auto& p = cfg.parallel;
  parallel::cost::Layout L;
  L.strategy = p.strategy;
  if (p.strategy == "fsdp") {
    L.strategy = p.sharding_strategy == "NO_SHARD"           ? "ddp"
                 : p.sharding_strategy.starts_with("HYBRID") ? "hsdp"
                                                             : "zero3";
  }
  L.tp = static_cast<int>(p.tensor_parallel_size);
  L.sp = p.sequence_parallel;
  L.pp = static_cast<int>(p.pipeline_parallel_size);
  L.cp = static_cast<int>(p.context_parallel_size);
  L.cp_mode = p.context_parallel_mode;
  L.schedule = p.pipeline_schedule;
  L.virtual_stages = parallel::pipeline::chunks_per_rank(
      p.pipeline_schedule, static_cast<int>(p.pipeline_virtual_stages));
  L.micro_batch = std::max<int64_t>(1, cfg.training.micro_batch_size);
  L.accumulation = std::max<int64_t>(1, cfg.training.gradient_accumulation_steps);
  L.compute = cfg.compute_dtype();
  L.checkpointing = nn::CheckpointPolicy::kind_name(config::checkpoint_policy(cfg).kind);
  L.offload = p.offload_optimizer == "nvme";
  return L;
}

std::string offload_dir_from(const config::TrainConfig& cfg) {
  return cfg.parallel.offload_dir.empty() ? cfg.output.dir + "/offload" : cfg.parallel.offload_dir;
}

int64_t memory_budget_from(const config::TrainConfig& cfg, comm::ProcessGroup* world) {
  if (!cfg.memory.budget.empty()) return parse_bytes(cfg.memory.budget);
  int64_t budget = available_memory_bytes() / 10 * 9 / std::max(1, launch::local_world_size());
  if (world && world->size() > 1) {
    Tensor t = Tensor::empty(Shape{1}, DType::i64, MemCategory::communication,
                             MemoryScope::current_tracker(), Device::cpu());
    t.data<int64_t>()[0] = budget;
    world->all_reduce(t, comm::ReduceOp::min)->wait();
    budget = t.data<int64_t>()[0];
  }
  return budget;
}

}  // namespace braid::train
