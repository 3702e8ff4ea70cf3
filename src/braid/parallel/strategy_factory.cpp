#include "braid/parallel/strategy_factory.h"

#include <algorithm>

#include "braid/comm/local/local_group.h"
#include "braid/core/error.h"
#include "braid/parallel/ddp/ddp_strategy.h"
#include "braid/parallel/pipeline/pipeline_strategy.h"
#include "braid/parallel/pipeline/stage_balance.h"
#include "braid/parallel/tensor/tensor_parallel_strategy.h"
#include "braid/parallel/zero/zero_strategy.h"

namespace braid::parallel {

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

void check_one_of(const std::string& key, const std::string& value,
                  const std::vector<std::string>& choices) {
  if (std::find(choices.begin(), choices.end(), value) == choices.end())
    BRAID_THROW("config key '", key, "' is '", value, "', expected one of: ", join(choices));
}

}  // namespace

std::vector<std::string> strategy_names() {
  return {"none", "ddp", "zero1", "zero2", "zero3", "fsdp"};
}

std::vector<std::string> fsdp_sharding_strategy_names() {
  return {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"};
}

namespace {

// tp and/or pp > 1: the data-parallel strategy over the mesh's dp group, wrapped in tensor and
// then pipeline parallelism.
std::unique_ptr<Strategy> model_parallel(const StrategySpec& spec,
                                         std::shared_ptr<comm::ProcessGroup> world, int tp, int pp,
                                         int launched) {
  const std::string layout = pp == 1   ? "parallel.tensor_parallel_size " + std::to_string(tp)
                             : tp == 1 ? "parallel.pipeline_parallel_size " + std::to_string(pp)
                                       : "parallel.pipeline_parallel_size " + std::to_string(pp) +
                                             " x parallel.tensor_parallel_size " +
                                             std::to_string(tp) + " = " + std::to_string(pp * tp);
  BRAID_CHECK(tp * pp <= launched && launched % (tp * pp) == 0, layout,
              tp * pp > launched ? " is larger than the " : " does not divide the ", launched,
              " launched rank(s)");
  BRAID_CHECK(spec.offload_optimizer == "none" && spec.offload_params == "none", "offload ",
              "(parallel.offload_optimizer / offload_params) with ",
              pp > 1 ? "parallel.pipeline_parallel_size" : "parallel.tensor_parallel_size",
              " > 1 is not supported yet");
  StrategySpec dp = spec;
  dp.tensor_parallel_size = 1;
  dp.pipeline_parallel_size = 1;
  dp.sequence_parallel = false;
  if (pp > 1) {
    const bool sharded_params =
        spec.name == "zero3" || (spec.name == "fsdp" && spec.sharding_strategy != "NO_SHARD");
    BRAID_CHECK(!sharded_params, "parallel.strategy ", spec.name,
                spec.name == "fsdp" ? " " + spec.sharding_strategy : std::string(),
                " with parallel.pipeline_parallel_size > 1 is not supported: parameters sharded "
                "per unit do not pipeline (as in DeepSpeed); use zero1, zero2 or ddp over dp");
    BRAID_CHECK(spec.sync_each_batch != "true",
                "parallel.sync_each_batch: true with parallel.pipeline_parallel_size > 1: a "
                "pipeline reduces each gradient once, after the schedule's last backward");
    dp.sync_each_batch = "false";
    check_one_of("parallel.pipeline_balance", spec.pipeline_balance, pipeline::balance_names());
    BRAID_CHECK(spec.pipeline_virtual_stages >= 1,
                "parallel.pipeline_virtual_stages must be >= 1, got ",
                spec.pipeline_virtual_stages);
  }
  auto mesh =
      std::make_shared<DeviceMesh>(DeviceMesh::strategy(world, launched / (tp * pp), tp, pp));
  std::unique_ptr<Strategy> inner = make_strategy(dp, mesh->group_ptr("dp"));
  Strategy& data_parallel = *inner;
  if (tp > 1)
    inner =
        std::make_unique<TensorParallelStrategy>(mesh, std::move(inner), spec.sequence_parallel);
  if (pp == 1) return inner;
  PipelineOptions o;
  o.schedule = pipeline::schedule_from_name(spec.pipeline_schedule);
  o.chunks = spec.pipeline_virtual_stages;
  o.balance = spec.pipeline_balance;
  o.micro_batch = spec.micro_batch_size;
  o.seq_len = spec.seq_len;
  o.trace = spec.pipeline_trace;
  return std::make_unique<PipelineStrategy>(mesh, std::move(inner), data_parallel, o);
}

}  // namespace

std::unique_ptr<Strategy> make_strategy(const StrategySpec& spec,
                                        std::shared_ptr<comm::ProcessGroup> world) {
  const int tp = spec.tensor_parallel_size, pp = spec.pipeline_parallel_size;
  const int launched = world ? world->size() : 1;
  BRAID_CHECK(tp >= 1, "parallel.tensor_parallel_size must be >= 1, got ", tp);
  BRAID_CHECK(pp >= 1, "parallel.pipeline_parallel_size must be >= 1, got ", pp);
  BRAID_CHECK(!spec.sequence_parallel || tp > 1, "parallel.sequence_parallel is true but ",
              "parallel.tensor_parallel_size is 1 (sequence parallelism splits what tensor "
              "parallelism replicates)");
  if (tp > 1 || pp > 1) return model_parallel(spec, std::move(world), tp, pp, launched);
  check_one_of("parallel.strategy", spec.name, strategy_names());
  check_one_of("parallel.sharding_strategy", spec.sharding_strategy,
               fsdp_sharding_strategy_names());
  check_one_of("parallel.sync_each_batch", spec.sync_each_batch, {"auto", "true", "false"});
  for (const auto& [key, value] : {std::pair{"parallel.offload_optimizer", spec.offload_optimizer},
                                   std::pair{"parallel.offload_params", spec.offload_params}}) {
    BRAID_CHECK(value != "cpu", "config key '", key, "' is 'cpu': on the cpu device the ",
                "state already lives in host memory; 'nvme' moves it to files in ",
                "parallel.offload_dir");
    check_one_of(key, value, {"none", "nvme"});
  }
  const bool offload = spec.offload_optimizer != "none" || spec.offload_params != "none";
  const int world_size = world ? world->size() : 1;
  BRAID_CHECK(spec.sharding_factor >= 0, "parallel.sharding_factor must be >= 0, got ",
              spec.sharding_factor);
  const bool fsdp = spec.name == "fsdp";
  const std::string& how = spec.sharding_strategy;
  BRAID_CHECK(
      !offload || (spec.name != "none" && spec.name != "ddp" && !(fsdp && how == "NO_SHARD")),
      "offload (parallel.offload_optimizer / offload_params) needs a sharded strategy "
      "(zero1, zero2, zero3 or fsdp with sharding), not ",
      spec.name, fsdp ? " " + how : std::string());
  if (spec.name == "none") {
    BRAID_CHECK(world_size == 1, "parallel.strategy is 'none' but ", world_size,
                " ranks were launched; choose a distributed strategy (ddp, zero1-3, fsdp) or "
                "launch one rank");
    return std::make_unique<DdpStrategy>(nullptr, DdpStrategyOptions{});
  }
  if (spec.name == "ddp" || (fsdp && how == "NO_SHARD")) {
    BRAID_CHECK(spec.sharding_factor == 0 || spec.sharding_factor == world_size,
                "parallel.sharding_factor ", spec.sharding_factor, " has no effect with ",
                fsdp ? "fsdp NO_SHARD" : "ddp", " (every rank holds everything)");
    DdpStrategyOptions o;
    o.bucket_mb = spec.bucket_mb;
    o.find_unused_parameters = spec.find_unused_parameters;
    o.reduce_dtype = spec.reduce_dtype;
    o.sync_each_batch = spec.sync_each_batch == "true";
    return std::make_unique<DdpStrategy>(std::move(world), o);
  }
  if (!world) world = comm::LocalGroup::create(1).front();  // zero over one rank
  ZeroOptions o;
  o.find_unused_parameters = spec.find_unused_parameters;
  o.reduce_dtype = spec.reduce_dtype;
  o.forward_prefetch = spec.forward_prefetch;
  o.backward_prefetch = spec.backward_prefetch;
  o.limit_all_gathers = spec.limit_all_gathers;
  o.param_persistence_threshold = spec.param_persistence_threshold;
  o.sharding_factor = spec.sharding_factor;
  o.offload_optimizer = spec.offload_optimizer == "nvme";
  o.offload_params = spec.offload_params == "nvme";
  o.offload_dir = spec.offload_dir;
  if (fsdp) {
    o.stage = 3;
    o.label = "fsdp " + how;
    o.reshard_after_forward = how == "FULL_SHARD" || how == "HYBRID_SHARD";
    const bool hybrid = how.rfind("HYBRID", 0) == 0;
    // HYBRID_SHARD's default shard group: the ranks of one node, as FSDP does.
    if (hybrid && o.sharding_factor == 0)
      o.sharding_factor = spec.ranks_per_node > 0 ? std::min(spec.ranks_per_node, world_size) : 0;
    BRAID_CHECK(hybrid || o.sharding_factor == 0 || o.sharding_factor == world_size,
                "parallel.sharding_factor ", o.sharding_factor,
                " needs a hybrid sharding "
                "strategy (HYBRID_SHARD or HYBRID_SHARD_ZERO2); ",
                how, " shards over all ", world_size, " ranks");
  } else {
    o.stage = spec.name == "zero1" ? 1 : spec.name == "zero2" ? 2 : 3;
    o.label = spec.name;
  }
  o.sync_each_batch =
      spec.sync_each_batch == "auto" ? o.stage >= 2 : spec.sync_each_batch == "true";
  return std::make_unique<ZeroStrategy>(std::move(world), o);
}

}  // namespace braid::parallel
