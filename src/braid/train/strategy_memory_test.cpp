// The ZeRO memory claims, measured: each rank's tracker peaks per category against the
// estimator (parallel/estimate/memory_estimate.h, whose header has the formulas) for every strategy
// on 2 and 4 thread ranks: ddp, fsdp NO_SHARD / FULL_SHARD / SHARD_GRAD_OP / HYBRID_SHARD(_ZERO2),
// zero1-3, with and without sync_each_batch, and offloaded. Every category must agree within
// 10%: parameters, gradients, optimizer state, activations, communication (the groups and the
// staging, given run_ranks' local groups) and scratch (given the Trainer's threads per rank).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "braid/train/memory_estimate_table.h"
#include "testing/train/memory_test_util.h"
#include "testing/train/strategy_parity_util.h"

namespace braid::train {
namespace {

struct Case {
  std::string strategy, how;
  int ranks = 2;
  int sharding_factor = 0;
  std::string sync_each_batch = "auto";
  bool offload = false;  // optimizer state and parameters to files
};

config::TrainConfig config_of(const Case& k) {
  config::TrainConfig c = tiny(1, 2, k.strategy);
  c.model.preset = "";
  c.model.config = six_block_model_config();
  if (!k.how.empty()) c.parallel.sharding_strategy = k.how;
  c.parallel.sharding_factor = k.sharding_factor;
  c.parallel.sync_each_batch = k.sync_each_batch;
  if (k.offload) {
    c.parallel.offload_optimizer = "nvme";
    c.parallel.offload_params = "nvme";
    c.parallel.offload_dir = private_offload_dir();
  }
  c.training.max_steps = 2;
  return c;
}

TEST(StrategyMemory, TrackerPeaksMatchTheEstimator) {
  {
    nn::TransformerOptions o;
    o.materialize = false;
    nn::Transformer m(nn::ModelConfig::from_hf_file(six_block_model_config()), o);
    const auto& u = m.layout().units();
    ASSERT_GT(6 * u[1].padded, 0.7 * m.layout().total()) << "the blocks should dominate";
  }
  const std::vector<Case> cases = {
      {"ddp", "", 2},
      {"fsdp", "NO_SHARD", 2},
      {"zero1", "", 2},
      {"zero1", "", 2, 0, "true"},
      {"zero2", "", 2},
      {"zero2", "", 2, 0, "false"},
      {"zero3", "", 2},
      {"zero3", "", 2, 0, "false"},
      {"fsdp", "FULL_SHARD", 2},
      {"fsdp", "SHARD_GRAD_OP", 2},
      // 4 ranks as 2 replicas x shard groups of 2: parameters / 2, gradients and state / 4.
      {"fsdp", "HYBRID_SHARD", 4, 2},
      {"fsdp", "HYBRID_SHARD_ZERO2", 4, 2},
      {"zero3", "", 4},
      {"zero3", "", 2, 0, "auto", true},
  };
  for (const Case& k : cases) {
    const config::TrainConfig c = config_of(k);
    const Peaks p = measure_peaks(c, k.ranks);
    const parallel::MemoryEstimate e = parallel::estimate_memory(thread_rank_inputs(c, k.ranks));
    const std::string name = k.strategy + " " + k.how + " x" + std::to_string(k.ranks) +
                             " sync_each_batch " + k.sync_each_batch +
                             (k.offload ? " offload" : "");
    print_comparison(name, p, e);
    expect_within_10_percent(name, p, e);
  }
}

}  // namespace
}  // namespace braid::train
