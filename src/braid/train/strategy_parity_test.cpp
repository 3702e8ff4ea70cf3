// Strategy parity on thread-backed ranks (Note [Parity setting], strategy_parity_util.h): at the
// same world size every data-parallel strategy gives DDP's weights bit for bit, in both
// accumulation modes, and matches one process to fp32 tolerance.
#include <gtest/gtest.h>

#include <mutex>

#include "braid/train/strategy_parity_util.h"
#include "testing/run_ranks.h"
#include "testing/tensor_compare.h"

namespace braid::train {
namespace {

// Rank 0's gathered weights; every rank must hold the same.
Tensor train_ranks(int n, const TrainConfig& cfg) {
  std::vector<Tensor> out(static_cast<size_t>(n));
  std::mutex mu;
  braid::testing::run_ranks(n, [&](comm::ProcessGroup& pg) {
    Trainer t(cfg, borrow(pg), quiet());
    Tensor w = train_and_gather(t);
    std::lock_guard<std::mutex> lock(mu);
    out[static_cast<size_t>(pg.rank())] = w;
  });
  for (int r = 1; r < n; ++r)
    EXPECT_TRUE(braid::testing::bit_equal(out[static_cast<size_t>(r)], out[0])) << "rank " << r;
  return out[0];
}

struct Case {
  int ranks;
  std::string sync_each_batch;
};

class StrategyParity : public ::testing::TestWithParam<Case> {};

TEST_P(StrategyParity, EveryStrategyGivesDdpsWeightsBitForBit) {
  const auto [n, sync] = GetParam();
  const TrainConfig base = parity_config(sync);
  const Tensor ddp = train_ranks(n, base);
  TrainConfig one = base;
  one.parallel.strategy = "none";
  one.training.micro_batch_size = n;
  const Tensor single = train_one(one);
  EXPECT_TRUE(weights_match(ddp, single)) << "ddp vs one process";
  TrainConfig unclipped = one;
  unclipped.optimizer.grad_clip = 0;
  EXPECT_FALSE(braid::testing::bit_equal(train_one(unclipped), single)) << "clipping is active";
  for (const StrategyVariant& v : strategy_variants()) {
    if (n < v.min_ranks || n % v.rank_divisor != 0) continue;
    TrainConfig c = base;
    v.apply(c);
    const Tensor w = train_ranks(n, c);
    EXPECT_TRUE(braid::testing::bit_equal(w, ddp)) << v.name << " vs ddp";
    EXPECT_TRUE(weights_match(w, single)) << v.name << " vs one process";
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, StrategyParity,
                         ::testing::Values(Case{2, "true"}, Case{2, "false"}, Case{4, "true"},
                                           Case{4, "false"}, Case{3, "true"}),
                         [](const auto& info) {
                           return std::to_string(info.param.ranks) + "_ranks_sync_each_batch_" +
                                  info.param.sync_each_batch;
                         });

}  // namespace
}  // namespace braid::train
