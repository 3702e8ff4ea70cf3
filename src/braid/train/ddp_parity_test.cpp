// DDP parity on the thread-backed group: N ranks with micro-batch b match one process with
// batch N b; accumulation of k micro-steps matches batch k b; runs are bit-identical.
#include <gtest/gtest.h>

#include <mutex>

#include "braid/train/trainer.h"
#include "testing/run_ranks.h"
#include "testing/tensor_compare.h"
#include "testing/train/ddp_parity_util.h"

namespace braid::train {
namespace {

std::vector<Tensor> train_ranks(int n, const config::TrainConfig& cfg) {
  std::vector<Tensor> out(n);
  std::mutex mu;
  braid::testing::run_ranks(n, [&](comm::ProcessGroup& pg) {
    Trainer t(cfg, borrow(pg), quiet());
    t.run();
    Tensor w = t.model().flat().params().clone();
    std::lock_guard<std::mutex> lock(mu);
    out[pg.rank()] = w;
  });
  return out;
}

class DdpParity : public ::testing::TestWithParam<int> {};

TEST_P(DdpParity, NRanksMatchOneProcessWithNTimesTheBatch) {
  const int n = GetParam();
  const int64_t b = 2;
  Tensor single = train_one(tiny(n * b, 1, "none"));
  std::vector<Tensor> ranks = train_ranks(n, tiny(b, 1, "ddp"));
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(braid::testing::bit_equal(ranks[r], ranks[0])) << "rank " << r << " diverged";
    EXPECT_TRUE(weights_match(ranks[r], single)) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, DdpParity, ::testing::Values(1, 2, 3, 4));

TEST(DdpParity, AccumulationMatchesTheBigBatch) {
  Tensor big = train_one(tiny(6, 1, "none"));
  Tensor accum = train_one(tiny(2, 3, "none"));
  EXPECT_TRUE(weights_match(accum, big));
  // Accumulation under DDP (no_sync on the first micro-steps) too.
  std::vector<Tensor> ddp = train_ranks(2, tiny(1, 3, "ddp"));
  EXPECT_TRUE(weights_match(ddp[0], big));
}

TEST(DdpDeterminism, SameConfigSameWorldIsBitIdentical) {
  std::vector<Tensor> a = train_ranks(2, tiny(2, 2, "ddp"));
  std::vector<Tensor> b = train_ranks(2, tiny(2, 2, "ddp"));
  EXPECT_TRUE(braid::testing::bit_equal(a[0], b[0]));
  EXPECT_TRUE(braid::testing::bit_equal(a[1], b[1]));
}

TEST(DdpParity, LinearScalingRuleIsTheScaledLearningRate) {
  // lr 1e-3 for a base batch of 2, scaled to the global batch of 4 (2 ranks x 2): exactly lr 2e-3.
  config::TrainConfig scaled = tiny(2, 1, "ddp");
  scaled.schedule.scale_lr = true;
  scaled.schedule.base_batch_size = 2;
  config::TrainConfig plain = tiny(2, 1, "ddp");
  plain.optimizer.lr = 2e-3;
  std::vector<Tensor> a = train_ranks(2, scaled), b = train_ranks(2, plain);
  EXPECT_TRUE(braid::testing::bit_equal(a[0], b[0]));
  EXPECT_FALSE(braid::testing::bit_equal(a[0], train_ranks(2, tiny(2, 1, "ddp"))[0]));
}

TEST(DdpErrors, BatchArithmeticThatDoesNotAddUpNamesTheNumbers) {
  config::TrainConfig c = tiny(2, 1, "ddp");
  c.training.global_batch_size = 5;
  for (const std::string& msg : construction_errors(2, c)) {
    EXPECT_NE(msg.find("global_batch_size 5 != micro_batch_size 2 x gradient_accumulation_steps "
                       "1 x data-parallel size 2 = 4"),
              std::string::npos)
        << msg;
  }
}

}  // namespace
}  // namespace braid::train
