// ParallelPlan: what parallelize() (parallelize.h) applies to a model, from the config's
// parallel section (train/plan_config.h) or a library user. The names a user gives:
//
//   name                           data parallelism over the mesh's dp ranks
//   none                           one process (ReplicatedDataParallel without a group)
//   ddp                            ReplicatedDataParallel
//   zero1 | zero2 | zero3          ShardedDataParallel, stage 1 / 2 / 3 (zero3 may shard in groups
//                                  of sharding_factor ranks, replicated across groups)
//   fsdp + FULL_SHARD              stage 3, parameters freed after forward
//          SHARD_GRAD_OP           stage 3, parameters kept from forward to backward
//          NO_SHARD                DDP
//          HYBRID_SHARD            FULL_SHARD inside groups of sharding_factor ranks
//          HYBRID_SHARD_ZERO2      SHARD_GRAD_OP inside groups of sharding_factor ranks
//
// tensor_parallel_size > 1 adds tensor (and sequence) parallelism, context_parallel_size > 1
// context parallelism, pipeline_parallel_size > 1 pipeline parallelism; every data-parallel
// name composes with each (docs/design.md
// "Parallelism as a plan"). unit_policies override, unit by unit, what the data-parallel name
// says (FSDP2's per-module fully_shard arguments).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "braid/core/dtype.h"

namespace braid::parallel {

// One unit's data-parallel policy where it differs from the plan's (unset: the plan's).
struct UnitPolicy {
  // Stage 3: shard this unit's parameters (false: keep them whole on every rank, as
  // param_persistence_threshold does for small units).
  std::optional<bool> shard_parameters;
  // Stage 3: free the gathered parameters after the unit's forward (false: keep them until its
  // backward, as SHARD_GRAD_OP does for every unit).
  std::optional<bool> reshard_after_forward;
};

struct ParallelPlan {
  std::string name = "none";
  std::string sharding_strategy = "FULL_SHARD";  // fsdp only
  int sharding_factor = 0;                       // 0: all ranks (HYBRID_*: ranks per node)
  double bucket_mb = 25.0;                       // ddp
  bool find_unused_parameters = false;
  DType reduce_dtype = DType::f32;       // gradients' reduction (Note [Reduce dtype])
  std::string sync_each_batch = "auto";  // auto | true | false (Note [Accumulation order])
  bool forward_prefetch = true;
  bool backward_prefetch = true;
  int limit_all_gathers = 2;
  int64_t param_persistence_threshold = 0;
  int ranks_per_node = 0;                  // the default shard group of HYBRID_* (0: all ranks)
  std::string offload_optimizer = "none";  // none | nvme
  std::string offload_params = "none";     // none | nvme (zero3 / fsdp)
  std::string offload_dir;                 // the offload files' directory
  // Per unit, by the unit's name ("embeddings", "block.3", "head"): FSDP2's per-module policy.
  std::map<std::string, UnitPolicy> unit_policies;
  // Tensor parallelism: data parallelism runs over dp = world / (pp x tp).
  int tensor_parallel_size = 1;
  bool sequence_parallel = false;
  // Context parallelism (Note [Context-parallel layout], nn/context_parallel.h): each
  // sequence split over context_parallel_size ranks, attention by ring or ulysses. The cp ranks
  // join data parallelism's reduction and sharding (dp_shard x cp), not its batch split.
  int context_parallel_size = 1;
  std::string context_parallel_mode = "ring";  // ring | ulysses
  // Pipeline parallelism.
  int pipeline_parallel_size = 1;
  std::string pipeline_schedule = "1f1b";  // gpipe | 1f1b | interleaved_1f1b | zb_h1
  int pipeline_virtual_stages = 1;
  std::string pipeline_balance = "uniform";  // uniform | parameters | time
  std::string pipeline_trace;
  int64_t micro_batch_size = 1;  // what pipeline_balance "time" measures with
  int64_t seq_len = 64;
};

std::vector<std::string> strategy_names();                // none, ddp, zero1, ...
std::vector<std::string> fsdp_sharding_strategy_names();  // FULL_SHARD, ...

}  // namespace braid::parallel
