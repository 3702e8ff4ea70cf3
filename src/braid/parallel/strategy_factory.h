// make_strategy: the one place that maps strategy names to implementations (the Trainer only
// sees parallel::Strategy).
//
//   none                           one process (DdpStrategy without a group)
//   ddp                            DdpStrategy
//   zero1 | zero2 | zero3          ZeroStrategy, stage 1 / 2 / 3 (zero3 may shard in groups of
//                                  sharding_factor ranks, replicated across groups)
//   fsdp + FULL_SHARD              stage 3, parameters freed after forward
//          SHARD_GRAD_OP           stage 3, parameters kept from forward to backward
//          NO_SHARD                DDP
//          HYBRID_SHARD            FULL_SHARD inside groups of sharding_factor ranks
//          HYBRID_SHARD_ZERO2      SHARD_GRAD_OP inside groups of sharding_factor ranks
// tensor_parallel_size > 1 wraps any of them in a TensorParallelStrategy, and
// pipeline_parallel_size > 1 that in a PipelineStrategy, on one dp x pp x tp mesh.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/parallel/strategy.h"

namespace braid::parallel {

struct StrategySpec {
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
  // Tensor parallelism (TensorParallelStrategy): the strategy above runs over dp = world / tp.
  int tensor_parallel_size = 1;
  bool sequence_parallel = false;
  // Pipeline parallelism (PipelineStrategy): the strategy above runs over dp = world / (pp x tp),
  // which must be none, ddp or zero1/2 (as DeepSpeed, stage 3 does not pipeline).
  int pipeline_parallel_size = 1;
  std::string pipeline_schedule = "1f1b";  // gpipe | 1f1b | interleaved_1f1b
  int pipeline_virtual_stages = 1;
  std::string pipeline_balance = "uniform";  // uniform | parameters | time
  std::string pipeline_trace;
  int64_t micro_batch_size = 1;  // what pipeline_balance "time" measures with
  int64_t seq_len = 64;
};

std::vector<std::string> strategy_names();                // none, ddp, zero1, ...
std::vector<std::string> fsdp_sharding_strategy_names();  // FULL_SHARD, ...

// Checks the spec (errors name the config key and the choices) and builds the strategy over
// world (null: one process). Collective over world.
std::unique_ptr<Strategy> make_strategy(const StrategySpec& spec,
                                        std::shared_ptr<comm::ProcessGroup> world);

}  // namespace braid::parallel
