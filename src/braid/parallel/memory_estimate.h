// What each data-parallel strategy keeps per rank for a model's training state, by the formulas
// of zero/zero_strategy.h (fp32 parameters and gradients, AdamW: 8 bytes of state per
// parameter): what an OutOfMemory at start says would fit, and (later) `braid estimate-memory`.
// In-flight units (gathered parameters, gradients being reduced) are counted as two of the
// model's largest units; activations are not counted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace braid::parallel {

struct StateEstimate {
  std::string strategy;  // "ddp", "zero1", "zero2", "zero3"
  int64_t parameters = 0, gradients = 0, optimizer_state = 0;
  int64_t total() const { return parameters + gradients + optimizer_state; }
};

// params: parameter elements; largest_unit: elements of the largest unit; ranks: data-parallel
// size. One estimate per strategy, least sharded first.
std::vector<StateEstimate> estimate_training_state(int64_t params, int64_t largest_unit, int ranks);

// "ddp 23.4 GiB, zero1 14.6 GiB, zero2 12.4 GiB, zero3 6.3 GiB"
std::string describe_estimates(const std::vector<StateEstimate>& estimates);

}  // namespace braid::parallel
