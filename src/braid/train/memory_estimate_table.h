// `braid estimate-memory`'s library side: a TrainConfig (a braid config, or the command line's
// options on a default one) as the estimator's inputs (parallel/estimate/memory_estimate.h), and
// the table it prints, one row per strategy, like `accelerate estimate-memory`.
#pragma once

#include <string>
#include <vector>

#include "braid/config/config.h"
#include "braid/parallel/estimate/memory_estimate.h"

namespace braid::train {

// How each rank runs: OpenMP threads (0: braid launch's default, this machine's cores divided by
// the ranks) and the communication backend (Note [Communication estimate]).
struct RankRuntime {
  int threads = 0;
  parallel::CommBackend backend;
};

// The model (preset, config.json or init_from, with its checkpointing policy), the strategy,
// precision, micro-batch (0 counts as 1), sequence length and optimizer of cfg, on world_size
// ranks. Errors name the config key.
parallel::MemoryEstimateInputs memory_estimate_inputs(const config::TrainConfig& cfg,
                                                      int world_size,
                                                      const RankRuntime& runtime = {});

// One estimate per strategy name ("ddp", "zero3", "fsdp" with cfg's sharding strategy, ...).
std::vector<parallel::MemoryEstimate> estimate_strategies(const config::TrainConfig& cfg,
                                                          int world_size,
                                                          const std::vector<std::string>& names,
                                                          const RankRuntime& runtime = {});

// What the estimates are of (model, parameters, ranks, precision, batch, checkpointing), then
// one row per strategy: parameters, gradients, optimizer state, activations, communication,
// scratch and total per rank.
std::string memory_estimate_table(const config::TrainConfig& cfg, int world_size,
                                  const std::vector<parallel::MemoryEstimate>& estimates,
                                  const RankRuntime& runtime = {});

}  // namespace braid::train
