// Note [Stage balance]: how the blocks are split into the pipeline's pp x v virtual stages
// (parallel.pipeline_balance):
//   uniform     n_layer / (pp x v) blocks each (n_layer must divide), as Megatron;
//   parameters  contiguous stages balanced by parameter count, the embeddings counted on the
//               first stage and the final norm and LM head (its table, tied or not) on the last;
//   time        the same with a measured cost: world rank 0 times the forward and backward of the
//               embeddings, one block and the head on a micro-batch of the configured size (a
//               one-block model of this config) and every rank uses its numbers.
// A stage that takes longer than the others stretches every step of a pipeline by the
// difference times the micro-batches, so with a large vocabulary the last stage usually takes
// fewer blocks.
#pragma once

#include <vector>

#include "braid/comm/process_group.h"
#include "braid/nn/model_config.h"
#include "braid/nn/staged_model.h"
#include "braid/parallel/pipeline/partition.h"
#include "braid/parallel/pipeline/pipeline_parallelism.h"

namespace braid::parallel::pipeline {

// Every virtual stage's blocks, the same on every rank. Collective over world for "time".
std::vector<BlockRange> plan_stages(const nn::ModelConfig& config, const PipelineOptions& options,
                                    int pp, comm::ProcessGroup& world);
// The same for a model declared whole: a Transformer by its config; another StagedModel by its
// own units ("uniform" or "parameters"; "time" measures a Transformer's blocks).
std::vector<BlockRange> plan_stages(const nn::StagedModel& model, const PipelineOptions& options,
                                    int pp, comm::ProcessGroup& world);

// The "parameters" split of a Transformer of this config into pp x v virtual stages: what
// plan_stages gives for it, without a group (estimate-memory and the planner use it).
std::vector<BlockRange> parameter_partition(const nn::ModelConfig& config, int pp, int v);

// The names parallel.pipeline_balance takes.
std::vector<std::string> balance_names();

}  // namespace braid::parallel::pipeline
