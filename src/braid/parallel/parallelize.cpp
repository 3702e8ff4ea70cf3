#include "braid/parallel/parallelize.h"

#include <algorithm>

#include "braid/comm/local/local_group.h"
#include "braid/core/error.h"
#include "braid/parallel/context/cp_group.h"
#include "braid/parallel/ddp/replicated_data_parallel.h"
#include "braid/parallel/pipeline/stage_balance.h"
#include "braid/parallel/zero/sharded_data_parallel.h"

namespace braid::parallel {

std::vector<std::string> strategy_names() {
  return {"none", "ddp", "zero1", "zero2", "zero3", "fsdp"};
}

std::vector<std::string> fsdp_sharding_strategy_names() {
  return {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"};
}

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

// What the plan's data-parallel name means, resolved against the dp ranks: the replicated
// strategies, or the sharded ones with their options and shard group size S.
struct DataParallelShape {
  bool replicated = true;  // none, ddp, fsdp NO_SHARD
  ZeroOptions zero;        // sharded only
  int shard = 1;           // S: ranks per shard group (replicated: dp)
};

// The layout of the ranks that split one batch: pp x cp x tp over the launched ranks, and what
// a pipeline or context parallelism refuses.
void check_model_parallel(const ParallelPlan& plan, int launched) {
  const int tp = plan.tensor_parallel_size, pp = plan.pipeline_parallel_size;
  const int cp = plan.context_parallel_size;
  BRAID_CHECK(tp >= 1, "parallel.tensor_parallel_size must be >= 1, got ", tp);
  BRAID_CHECK(pp >= 1, "parallel.pipeline_parallel_size must be >= 1, got ", pp);
  BRAID_CHECK(cp >= 1, "parallel.context_parallel_size must be >= 1, got ", cp);
  BRAID_CHECK(!plan.sequence_parallel || tp > 1, "parallel.sequence_parallel is true but ",
              "parallel.tensor_parallel_size is 1 (sequence parallelism splits what tensor "
              "parallelism replicates)");
  if (tp * pp * cp == 1) return;
  std::string layout;
  for (const auto& [key, n] :
       {std::pair{"pipeline_parallel_size", pp}, std::pair{"context_parallel_size", cp},
        std::pair{"tensor_parallel_size", tp}})
    if (n > 1)
      layout += (layout.empty() ? "parallel." : " x parallel.") + std::string(key) + " " +
                std::to_string(n);
  if ((tp > 1) + (pp > 1) + (cp > 1) > 1) layout += " = " + std::to_string(tp * pp * cp);
  BRAID_CHECK(tp * pp * cp <= launched && launched % (tp * pp * cp) == 0, layout,
              tp * pp * cp > launched ? " is larger than the " : " does not divide the ", launched,
              " launched rank(s)");
  const CpMode mode = cp_mode_from_name(plan.context_parallel_mode);
  if (cp > 1) nn::check_sequence_split(plan.seq_len, cp, sequence_split(mode));
  if (pp == 1) return;
  BRAID_CHECK(plan.sync_each_batch != "true",
              "parallel.sync_each_batch: true with parallel.pipeline_parallel_size > 1: a "
              "pipeline reduces each gradient once, after the schedule's last backward");
  check_one_of("parallel.pipeline_balance", plan.pipeline_balance, pipeline::balance_names());
  BRAID_CHECK(plan.pipeline_virtual_stages >= 1,
              "parallel.pipeline_virtual_stages must be >= 1, got ", plan.pipeline_virtual_stages);
}

// The data-parallel name over dp ranks (every check names its key and the numbers).
DataParallelShape data_parallel_shape(const ParallelPlan& plan, int dp) {
  check_one_of("parallel.strategy", plan.name, strategy_names());
  check_one_of("parallel.sharding_strategy", plan.sharding_strategy,
               fsdp_sharding_strategy_names());
  check_one_of("parallel.sync_each_batch", plan.sync_each_batch, {"auto", "true", "false"});
  // offload_optimizer cpu: the state in host memory, the model on a device (Note [Optimizer
  // state on the host]); the device is checked where the store is made.
  check_one_of("parallel.offload_optimizer", plan.offload_optimizer, {"none", "cpu", "nvme"});
  BRAID_CHECK(plan.offload_params != "cpu",
              "config key 'parallel.offload_params' is 'cpu': braid offloads parameter shards to "
              "files only ('nvme', with parallel.offload_optimizer nvme)");
  check_one_of("parallel.offload_params", plan.offload_params, {"none", "nvme"});
  BRAID_CHECK(plan.offload_params == "none" || plan.offload_optimizer == "nvme",
              "parallel.offload_params nvme needs parallel.offload_optimizer nvme (the optimizer "
              "updates the offloaded shards in place), got offload_optimizer ",
              plan.offload_optimizer);
  const bool offload = plan.offload_optimizer != "none" || plan.offload_params != "none";
  BRAID_CHECK(plan.sharding_factor >= 0, "parallel.sharding_factor must be >= 0, got ",
              plan.sharding_factor);
  const bool fsdp = plan.name == "fsdp";
  const std::string& how = plan.sharding_strategy;
  BRAID_CHECK(
      !offload || (plan.name != "none" && plan.name != "ddp" && !(fsdp && how == "NO_SHARD")),
      "offload (parallel.offload_optimizer / offload_params) needs a sharded strategy "
      "(zero1, zero2, zero3 or fsdp with sharding), not ",
      plan.name, fsdp ? " " + how : std::string());
  DataParallelShape out;
  out.shard = dp;
  if (plan.name == "none") {
    BRAID_CHECK(dp == 1, "parallel.strategy is 'none' but ", dp,
                " ranks were launched; choose a distributed strategy (ddp, zero1-3, fsdp) or "
                "launch one rank");
    return out;
  }
  if (plan.name == "ddp" || (fsdp && how == "NO_SHARD")) {
    BRAID_CHECK(plan.sharding_factor == 0 || plan.sharding_factor == dp,
                "parallel.sharding_factor ", plan.sharding_factor, " has no effect with ",
                fsdp ? "fsdp NO_SHARD" : "ddp", " (every rank holds everything)");
    return out;
  }
  out.replicated = false;
  ZeroOptions& o = out.zero;
  o.find_unused_parameters = plan.find_unused_parameters;
  o.reduce_dtype = plan.reduce_dtype;
  o.forward_prefetch = plan.forward_prefetch;
  o.backward_prefetch = plan.backward_prefetch;
  o.limit_all_gathers = plan.limit_all_gathers;
  o.param_persistence_threshold = plan.param_persistence_threshold;
  o.sharding_factor = plan.sharding_factor;
  o.offload_optimizer = plan.offload_optimizer == "nvme";
  o.offload_optimizer_host = plan.offload_optimizer == "cpu";
  o.offload_params = plan.offload_params == "nvme";
  o.offload_dir = plan.offload_dir;
  if (fsdp) {
    o.stage = 3;
    o.label = "fsdp " + how;
    o.reshard_after_forward = how == "FULL_SHARD" || how == "HYBRID_SHARD";
    const bool hybrid = how.rfind("HYBRID", 0) == 0;
    // HYBRID_SHARD's default shard group: the ranks of one node, as FSDP does.
    if (hybrid && o.sharding_factor == 0)
      o.sharding_factor = plan.ranks_per_node > 0 ? std::min(plan.ranks_per_node, dp) : 0;
    BRAID_CHECK(hybrid || o.sharding_factor == 0 || o.sharding_factor == dp,
                "parallel.sharding_factor ", o.sharding_factor,
                " needs a hybrid sharding strategy (HYBRID_SHARD or HYBRID_SHARD_ZERO2); ", how,
                " shards over all ", dp, " ranks");
  } else {
    o.stage = plan.name == "zero1" ? 1 : plan.name == "zero2" ? 2 : 3;
    o.label = plan.name;
  }
  o.sync_each_batch =
      plan.sync_each_batch == "auto" ? o.stage >= 2 : plan.sync_each_batch == "true";
  if (plan.pipeline_parallel_size > 1) o.sync_each_batch = false;  // Note [Pipeline reduction]
  BRAID_CHECK(
      o.stage < 3 || plan.pipeline_parallel_size == 1 ||
          !pipeline::has_weight_passes(pipeline::schedule_from_name(plan.pipeline_schedule)),
      "parallel.pipeline_schedule: ", plan.pipeline_schedule,
      " does not run with sharded parameters (", o.label,
      "): its weight-gradient passes run after the parameters are resharded; use zero1, "
      "zero2, ddp or fsdp NO_SHARD, or parallel.pipeline_schedule: 1f1b");
  BRAID_CHECK(o.stage == 3 || o.sharding_factor == 0 || o.sharding_factor == dp,
              "parallel.sharding_factor ", o.sharding_factor,
              " applies to sharded parameters (zero3 / fsdp); ", o.label, " shards over all ", dp,
              " ranks");
  out.shard = o.sharding_factor > 0 ? o.sharding_factor : dp;
  BRAID_CHECK(out.shard <= dp && dp % out.shard == 0, "parallel.sharding_factor ", out.shard,
              " does not divide the data-parallel size ", dp,
              " (each shard group holds sharding_factor ranks; the groups must tile the ranks)");
  o.unit_policies = plan.unit_policies;
  return out;
}

// 1. The pipeline split.
std::unique_ptr<PipelineParallelism> apply_pipeline(const ParallelPlan& plan,
                                                    const std::shared_ptr<DeviceMesh>& mesh) {
  if (plan.pipeline_parallel_size == 1) return nullptr;
  PipelineOptions o;
  o.schedule = pipeline::schedule_from_name(plan.pipeline_schedule);
  o.chunks = pipeline::chunks_per_rank(plan.pipeline_schedule, plan.pipeline_virtual_stages);
  o.balance = plan.pipeline_balance;
  o.micro_batch = plan.micro_batch_size;
  o.seq_len = plan.seq_len / plan.context_parallel_size;  // the tokens a stage's rank computes
  o.trace = plan.pipeline_trace;
  return std::make_unique<PipelineParallelism>(mesh, o);
}

// 2. Tensor (and sequence) parallelism.
std::unique_ptr<TensorParallelism> apply_tensor_parallel(const ParallelPlan& plan,
                                                         const DeviceMesh& mesh) {
  if (plan.tensor_parallel_size == 1) return nullptr;
  return std::make_unique<TensorParallelism>(mesh.group_ptr("tp"), plan.sequence_parallel);
}

// 3. Context parallelism.
std::unique_ptr<CpGroup> apply_context_parallel(const ParallelPlan& plan, const DeviceMesh& mesh) {
  if (plan.context_parallel_size == 1) return nullptr;
  return std::make_unique<CpGroup>(mesh.group_ptr("cp"),
                                   cp_mode_from_name(plan.context_parallel_mode));
}

// 4. Data parallelism over the dp ranks (their cp ranks included: they sum their gradients).
std::unique_ptr<DataParallel> apply_data_parallel(const ParallelPlan& plan,
                                                  const DataParallelShape& shape,
                                                  const DeviceMesh& mesh) {
  BRAID_CHECK(!shape.replicated || plan.unit_policies.empty(),
              "parallel.unsharded_units / keep_gathered_units: per-unit policies apply to "
              "sharded parameters (zero3 / fsdp), not ",
              plan.name);
  // The group it runs over holds the cp ranks of each batch too.
  const std::string group_name = mesh.size("cp") > 1 ? "dp x cp" : "dp";
  if (shape.replicated) {
    // One batch split over cp ranks still sums their gradients: plain reduction over cp.
    if (plan.name == "none" && mesh.size("dp") == 1)
      return std::make_unique<ReplicatedDataParallel>(nullptr, ReplicatedOptions{});
    ReplicatedOptions o;
    o.bucket_mb = plan.bucket_mb;
    o.find_unused_parameters = plan.find_unused_parameters;
    o.reduce_dtype = plan.reduce_dtype;
    o.sync_each_batch = plan.sync_each_batch == "true";
    o.group_name = group_name;
    return std::make_unique<ReplicatedDataParallel>(mesh.group_ptr("dp"), o);
  }
  ZeroOptions o = shape.zero;
  // Each rank its own offload file, also where tp and pp peers share a dp coordinate.
  o.offload_rank = mesh.world().rank();
  o.group_name = group_name;
  return std::make_unique<ShardedDataParallel>(ZeroGroups::from_mesh(mesh, o.stage == 3), o);
}

}  // namespace

std::unique_ptr<Parallelism> parallelize(const ParallelPlan& plan,
                                         std::shared_ptr<comm::ProcessGroup> world) {
  const int launched = world ? world->size() : 1;
  check_model_parallel(plan, launched);
  const int tp = plan.tensor_parallel_size, pp = plan.pipeline_parallel_size;
  const int cp = plan.context_parallel_size;
  const int dp = launched / (tp * pp * cp);
  const DataParallelShape shape = data_parallel_shape(plan, dp);
  if (!world) world = comm::LocalGroup::create(1).front();  // one process
  auto mesh = std::make_shared<DeviceMesh>(DeviceMesh::training(
      world,
      {.dp_replicate = dp / shape.shard, .dp_shard = shape.shard, .pp = pp, .cp = cp, .tp = tp}));
  auto pipeline = apply_pipeline(plan, mesh);
  auto tensor = apply_tensor_parallel(plan, *mesh);
  auto context = apply_context_parallel(plan, *mesh);
  auto data = apply_data_parallel(plan, shape, *mesh);
  return std::make_unique<Parallelism>(mesh, std::move(data), std::move(tensor),
                                       std::move(pipeline), std::move(context));
}

}  // namespace braid::parallel
