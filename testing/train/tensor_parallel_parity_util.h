// Shared by the tensor-parallel parity tests (thread-backed ranks and real processes under
// mpirun): the tiny run with tensor parallelism, and the one process that reads the same global
// batches.
#pragma once

#include <string>

#include "testing/train/ddp_parity_util.h"

namespace braid::train {

// 4 steps of `preset`, accumulation 2, clipping on (the tiny model's norm is above the limit, so
// the model-parallel norm decides the coefficient), `strategy` over dp = world / tp.
inline config::TrainConfig tp_parity_config(const std::string& preset, int tp, bool sp,
                                            const std::string& strategy) {
  config::TrainConfig c = tiny(2, 2, strategy);
  c.model.preset = preset;
  c.training.max_steps = 4;
  c.parallel.tensor_parallel_size = tp;
  c.parallel.sequence_parallel = sp;
  return c;
}

// One process reading what dp data-parallel replicas of tp_parity_config read.
inline config::TrainConfig tp_reference_config(const std::string& preset, int dp) {
  config::TrainConfig c = tp_parity_config(preset, 1, false, "none");
  c.training.micro_batch_size = 2 * dp;
  return c;
}

}  // namespace braid::train
