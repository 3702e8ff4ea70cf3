// Splitting a model's blocks into the pipeline's virtual stages: contiguous, non-empty ranges
// covering [0, n_layer) in order, one per virtual stage (Note [Stage balance],
// stage_balance.h, chooses between them).
#pragma once

#include <string>
#include <vector>

namespace braid::parallel::pipeline {

struct BlockRange {
  int begin = 0;
  int end = 0;
  int size() const { return end - begin; }
  bool operator==(const BlockRange&) const = default;
};

// n_layer / (pp x v) blocks each; throws naming the keys unless that divides evenly and every
// stage gets a block.
std::vector<BlockRange> uniform_partition(int n_layer, int pp, int v);

// The split that minimises the largest stage cost, where a stage costs the sum of its blocks'
// costs plus first_extra on the first stage (embeddings) and last_extra on the last (final norm
// and LM head). Exact (dynamic programming); of several optimal splits, the one with the
// earliest cuts. Throws when pp x v exceeds the blocks.
std::vector<BlockRange> balanced_partition(const std::vector<double>& block_costs,
                                           double first_extra, double last_extra, int pp, int v);

std::string describe_partition(const std::vector<BlockRange>& parts);  // "[0,3) [3,6)"

}  // namespace braid::parallel::pipeline
