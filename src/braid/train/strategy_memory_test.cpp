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
  std::string precision = "fp32";
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
  c.training.precision = k.precision;
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
      {"zero3", "", 2, 0, "auto", true, "bf16"},  // Note [Offloaded compute copy]
  };
  for (const Case& k : cases) {
    const config::TrainConfig c = config_of(k);
    const Peaks p = measure_peaks(c, k.ranks);
    const parallel::MemoryEstimate e = parallel::estimate_memory(thread_rank_inputs(c, k.ranks));
    const std::string name = k.strategy + " " + k.how + " x" + std::to_string(k.ranks) +
                             " sync_each_batch " + k.sync_each_batch +
                             (k.offload ? " offload" : "") + " " + k.precision;
    print_comparison(name, p, e);
    expect_within_10_percent(name, p, e);
  }
}

// Rank 0's parameter bytes held between steps (after training: nothing gathered).
int64_t resident_parameters(const config::TrainConfig& c) {
  int64_t out = 0;
  braid::testing::run_ranks(2, [&](comm::ProcessGroup& pg) {
    Trainer t(c, borrow(pg), quiet());
    t.run();
    if (pg.rank() == 0) out = t.memory()->current(MemCategory::parameters);
  });
  return out;
}

// FSDP2's per-module policy through the config: a block left whole on every rank holds the half
// of its f32 values a shard of 2 would not, between steps; a unit that stays gathered anyway
// (the tied embeddings, which the head borrows) costs less whole than sharded, at the peak; a
// block kept gathered from its forward to its backward cannot lower the peak. The weights are
// ZeRO-3's bit for bit (strategy_parity_test's zero3_per_unit_policy).
TEST(StrategyMemory, PerUnitPoliciesChangeWhatEachUnitHolds) {
  config::TrainConfig c = config_of({"zero3", "", 2});
  nn::TransformerOptions declared;
  declared.materialize = false;
  const nn::Transformer m(model_config_from(c), declared);
  const nn::ParamLayout padded = m.layout().with_padding(2 * nn::ParamLayout::kAlign);
  const auto& units = padded.units();
  const int64_t sharded = resident_parameters(c);
  c.parallel.unsharded_units = "block.3";
  EXPECT_EQ(resident_parameters(c) - sharded, 4 * units[4].padded / 2);
  c.parallel.unsharded_units = "";
  const Peaks peak = measure_peaks(c, 2);
  c.parallel.unsharded_units = "embeddings";
  EXPECT_EQ(measure_peaks(c, 2).parameters, peak.parameters - 4 * units[0].padded / 2);
  c.parallel.unsharded_units = "";
  c.parallel.keep_gathered_units = "block.0,block.1";
  EXPECT_GE(measure_peaks(c, 2).parameters, peak.parameters);
  // A name that is no unit is refused, naming the key and the units there are.
  c.parallel.keep_gathered_units = "block.99";
  auto errors = braid::testing::run_ranks_collect(
      2, [&](comm::ProcessGroup& pg) { Trainer t(c, borrow(pg), quiet()); });
  for (auto& e : errors)
    EXPECT_NE(braid::testing::what(e).find("keep_gathered_units: 'block.99' names no unit of the "
                                           "model (embeddings, block.0"),
              std::string::npos)
        << braid::testing::what(e);
}

}  // namespace
}  // namespace braid::train
