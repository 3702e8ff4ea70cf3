// Splitting a model's blocks into the pipeline's virtual stages: contiguous, non-empty ranges
// covering [0, n_layer) in order, one per virtual stage (pp x v of them; virtual stage k runs
// on rank k % pp, Note [Stage balance] in stage_balance.h chooses the costs).
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

// n_layer / (pp x v) blocks each; throws naming the keys unless every stage gets a block and
// the blocks divide evenly.
std::vector<BlockRange> uniform_partition(int n_layer, int pp, int v);

// The split that minimises the largest stage cost, where a stage costs the sum of its blocks'
// costs plus first_extra on the first stage (embeddings) and last_extra on the last (final norm
// and LM head). Exact (dynamic programming over the blocks). Throws when pp x v exceeds the
// blocks or a cost is negative.
//
// Note [Balanced ties]: many splits share the smallest largest cost (a heavy first stage leaves
// the others free). Stage by stage from the first, the cut taken is the earliest of those that
// keep the rest optimal too: the stages after a bottleneck stay balanced among themselves, and
// an exact tie gives the earlier stage fewer blocks, since under 1f1b the earlier stages hold
// more micro-batches in flight.
std::vector<BlockRange> balanced_partition(const std::vector<double>& block_costs,
                                           double first_extra, double last_extra, int pp, int v);

std::string describe_partition(const std::vector<BlockRange>& parts);  // "[0,3) [3,6)"

}  // namespace braid::parallel::pipeline
