// From the config's parallel section to a parallel::ParallelPlan, and the per-rank memory
// budget (memory.budget).
#pragma once

#include <cstdint>
#include <string>

#include "braid/comm/process_group.h"
#include "braid/config/config.h"
#include "braid/parallel/cost/step_cost.h"
#include "braid/parallel/plan.h"

namespace braid::train {

parallel::ParallelPlan parallel_plan_from(const config::TrainConfig& cfg);

// The config's layout as the step-time model names it (parallel/cost/step_cost.h): fsdp's
// FULL_SHARD and SHARD_GRAD_OP are zero3, HYBRID_* hsdp, NO_SHARD ddp. The batch sizes as the
// trainer resolved them.
parallel::cost::Layout layout_from(const config::TrainConfig& cfg);

// Where offload files go: parallel.offload_dir, or its default <output.dir>/offload.
std::string offload_dir_from(const config::TrainConfig& cfg);

// memory.budget in bytes (0: none). Empty: 90% of the node's available memory (MemAvailable,
// less a tenth for what is not tensors) shared among the node's ranks; the ranks agree on the
// smallest. Collective over world (may be null).
int64_t memory_budget_from(const config::TrainConfig& cfg, comm::ProcessGroup* world);

}  // namespace braid::train
