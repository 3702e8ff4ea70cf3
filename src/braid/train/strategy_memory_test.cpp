// The ZeRO memory claims, measured: each rank's tracker peaks per category against the formulas
// of parallel/zero/zero_strategy.h, for every strategy, on 2 thread ranks. fp32 AdamW, P padded
// parameter elements (the layout padded for N ranks), N ranks:
//   ddp    params 4P      grads 4P                    optimizer 8P
//   zero1  params 4P      grads 4P                    optimizer 8P/N
//   zero2  params 4P      grads 4P/N + in flight      optimizer 8P/N
//   zero3  params 4P/N + gathered units in flight, grads as zero2, optimizer 8P/N
// "In flight" are whole units: the ones a strategy keeps gathered (the tied embedding, which the
// LM head borrows, and the head) plus limit_all_gathers blocks for parameters; for gradients the
// embedding's (it collects from the head's backward to the end) and two blocks (the one in
// backward and the one being reduced). Everything must agree within 10%.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "braid/train/strategy_parity_util.h"

namespace braid::train {
namespace {

struct Peaks {
  int64_t params = 0, grads = 0, optimizer = 0;
};

struct Case {
  std::string strategy, how;
  int ranks = 2;
  int sharding_factor = 0;
  std::string sync_each_batch = "auto";
  double params = 0, grads = 0, optimizer = 0;  // the formulas, bytes
  bool offload = false;                         // optimizer state and parameters to files
};

Peaks run(const Case& k) {
  TrainConfig c = tiny(1, 2, k.strategy);
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
  Peaks out;
  std::mutex mu;
  braid::testing::run_ranks(k.ranks, [&](comm::ProcessGroup& pg) {
    Trainer t(c, borrow(pg), quiet());
    t.run();
    auto& m = *t.memory();
    std::lock_guard<std::mutex> lock(mu);
    if (pg.rank() != 0) return;
    out = {m.peak(MemCategory::parameters), m.peak(MemCategory::gradients),
           m.peak(MemCategory::optimizer_state)};
  });
  return out;
}

::testing::AssertionResult within_10_percent(int64_t actual, double expected, const char* what) {
  const double diff = std::abs(static_cast<double>(actual) - expected);
  if (diff <= 0.1 * expected) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": measured " << actual << " bytes, formula "
                                       << expected << " (off by " << 100 * diff / expected << "%)";
}

TEST(StrategyMemory, TrackerPeaksMatchTheZeroFormulas) {
  nn::TransformerOptions o;
  o.materialize = false;
  nn::Transformer m(nn::ModelConfig::from_hf_file(six_block_model_config()), o);
  // Sizes in elements of the layout padded for N ranks.
  struct Sizes {
    double P, E, H, B;
  };
  auto sizes = [&](int N) {
    const nn::ParamLayout l = m.layout().with_padding(N * nn::ParamLayout::kAlign);
    const auto& u = l.units();
    return Sizes{static_cast<double>(l.total()), static_cast<double>(u.front().padded),
                 static_cast<double>(u.back().padded), static_cast<double>(u[1].padded)};
  };
  const double n = static_cast<double>(m.layout().num_parameters());
  const Sizes s2 = sizes(2), s4 = sizes(4);
  ASSERT_GT(6 * s2.B, 0.7 * s2.P) << "the blocks should dominate";

  // Stages 2 and 3 reduce every micro-step unless told not to (then every unit's gradient is
  // kept whole between micro-steps: 4P, as FSDP's no_sync).
  auto zero3_params = [](const Sizes& s, int S) { return 4 * (s.P / S + s.E + s.H + 2 * s.B); };
  auto sharded_grads = [](const Sizes& s, int N) { return 4 * (s.P / N + s.E + 2 * s.B); };
  const double P = s2.P;
  std::vector<Case> cases = {
      {"ddp", "", 2, 0, "auto", 4 * P, 4 * P, 8 * n},
      {"fsdp", "NO_SHARD", 2, 0, "auto", 4 * P, 4 * P, 8 * n},
      {"zero1", "", 2, 0, "auto", 4 * P, 4 * P, 8 * n / 2},
      {"zero1", "", 2, 0, "true", 4 * P, 4 * (P + P / 2), 8 * n / 2},
      {"zero2", "", 2, 0, "auto", 4 * P, sharded_grads(s2, 2), 8 * n / 2},
      {"zero2", "", 2, 0, "false", 4 * P, 4 * (P / 2 + P), 8 * n / 2},
      {"zero3", "", 2, 0, "auto", zero3_params(s2, 2), sharded_grads(s2, 2), 8 * n / 2},
      {"zero3", "", 2, 0, "false", zero3_params(s2, 2), 4 * (P / 2 + P), 8 * n / 2},
      {"fsdp", "FULL_SHARD", 2, 0, "auto", zero3_params(s2, 2), sharded_grads(s2, 2), 8 * n / 2},
      // SHARD_GRAD_OP keeps every unit from its forward to its backward: all of them at once.
      {"fsdp", "SHARD_GRAD_OP", 2, 0, "auto", 4 * (P / 2 + P), sharded_grads(s2, 2), 8 * n / 2},
      // 4 ranks as 2 replicas x shard groups of 2: parameters / 2, gradients and state / 4.
      {"fsdp", "HYBRID_SHARD", 4, 2, "auto", zero3_params(s4, 2), sharded_grads(s4, 4), 8 * n / 4},
      {"fsdp", "HYBRID_SHARD_ZERO2", 4, 2, "auto", 4 * (s4.P / 2 + s4.P), sharded_grads(s4, 4),
       8 * n / 4},
      {"zero3", "", 4, 0, "auto", zero3_params(s4, 4), sharded_grads(s4, 4), 8 * n / 4},
      // Offloaded (Note [Offload pages]): no shards, no gradient pieces, no optimizer state in
      // memory. What remains: the units in flight (the next block's shard is read ahead rather
      // than gathered: half a block on 2 ranks), the reduced piece being written after backward,
      // and the optimizer's pages (being updated, read ahead, written back: 3 blocks' pieces).
      {"zero3", "", 2, 0, "auto", 4 * (s2.E + s2.H + s2.B + s2.B / 2),
       4 * (s2.E + 2 * s2.B + s2.E / 2), 3 * 8 * s2.B / 2, true},
  };
  for (const Case& k : cases) {
    const Peaks p = run(k);
    const std::string name = k.strategy + " " + k.how + " x" + std::to_string(k.ranks) +
                             " sync_each_batch " + k.sync_each_batch;
    std::printf("%-44s params %9lld (formula %9.0f) grads %9lld (%9.0f) optimizer %9lld (%9.0f)\n",
                name.c_str(), static_cast<long long>(p.params), k.params,
                static_cast<long long>(p.grads), k.grads, static_cast<long long>(p.optimizer),
                k.optimizer);
    EXPECT_TRUE(within_10_percent(p.params, k.params, "parameters")) << name;
    EXPECT_TRUE(within_10_percent(p.grads, k.grads, "gradients")) << name;
    EXPECT_TRUE(within_10_percent(p.optimizer, k.optimizer, "optimizer state")) << name;
  }
}

}  // namespace
}  // namespace braid::train
