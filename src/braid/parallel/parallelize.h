// parallelize(): the plan applied, in the order torchtitan's parallelize_llama applies it, on
// one DeviceMesh built here (dp_replicate x dp_shard x pp x cp x tp, Note [Mesh groups]):
//   1. the pipeline split   (apply_pipeline: the stages and the schedule, over pp)
//   2. tensor parallelism   (apply_tensor_parallel: the layers' column/row/vocab split and
//                            sequence parallelism, over tp; the per-module plan is the model's,
//                            Note [Tensor-parallel layout])
//   3. context parallelism  (apply_context_parallel: the sequence split over cp, attention by
//                            ring or ulysses, Note [Context-parallel layout])
//   4. data parallelism     (apply_data_parallel: replicated or sharded over dp_replicate x
//                            dp_shard x cp, with a policy per unit)
// Activation checkpointing is the model's (Transformer::set_activation_checkpointing). Every
// check names the config key and the numbers. The result is the runtime the Accelerator drives
// (parallelism.h); a Transformer is then declared with its tensor_parallel() slices (and
// context_parallel() split) and
// materialised by it, which first splits a pipeline's stages off the model declared whole.
#pragma once

#include <memory>

#include "braid/comm/process_group.h"
#include "braid/parallel/parallelism.h"
#include "braid/parallel/plan.h"

namespace braid::parallel {

// Checks the plan against the launched ranks (world; null: one process) and builds the mesh and
// the runtime. Collective over world.
std::unique_ptr<Parallelism> parallelize(const ParallelPlan& plan,
                                         std::shared_ptr<comm::ProcessGroup> world);

}  // namespace braid::parallel
