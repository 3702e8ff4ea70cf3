// Strategy parity as real processes under mpirun (Note [Parity setting],
// strategy_parity_util.h): every data-parallel strategy that fits the world size gives DDP's
// weights bit for bit, in both accumulation modes, and every rank holds the same weights.
#include <gtest/gtest.h>

#include "testing/tensor_compare.h"
#include "testing/train/mpi_test_world.h"
#include "testing/train/strategy_parity_util.h"

namespace braid::train {
namespace {

Tensor train(const config::TrainConfig& cfg) {
  Trainer t(cfg, mpi_test_world(), quiet());
  return train_and_gather(t);
}

// Every strategy variant that fits the world size, trained from base, gives `ddp` bit for bit
// on every rank.
void expect_every_strategy_gives(const Tensor& ddp, const config::TrainConfig& base) {
  const int n = mpi_test_world()->size();
  for (const StrategyVariant& v : strategy_variants()) {
    if (n < v.min_ranks || n % v.rank_divisor != 0) continue;
    config::TrainConfig c = base;
    v.apply(c);
    const Tensor w = train(c);
    EXPECT_TRUE(braid::testing::bit_equal(w, ddp))
        << v.name << " vs ddp, rank " << mpi_test_world()->rank();
    EXPECT_TRUE(same_on_every_rank(w)) << v.name;
  }
}

class StrategyParityMpi : public ::testing::TestWithParam<std::string> {};

TEST_P(StrategyParityMpi, EveryStrategyGivesDdpsWeightsBitForBit) {
  const int n = mpi_test_world()->size();
  const config::TrainConfig base = parity_config(GetParam());
  const Tensor ddp = train(base);
  EXPECT_TRUE(same_on_every_rank(ddp));
  config::TrainConfig one = base;
  one.parallel.strategy = "none";
  one.training.micro_batch_size = n;
  EXPECT_TRUE(weights_match(ddp, train_one(one))) << "ddp vs one process";
  expect_every_strategy_gives(ddp, base);
}

INSTANTIATE_TEST_SUITE_P(Modes, StrategyParityMpi, ::testing::Values("true", "false"),
                         [](const auto& info) { return "sync_each_batch_" + info.param; });

// Mixed precision as real processes: bf16 compute copies (and fp16 with its loss scaler) keep
// every strategy on DDP's weights bit for bit, on every rank.
class StrategyParityMixedMpi : public ::testing::TestWithParam<std::string> {};

TEST_P(StrategyParityMixedMpi, EveryStrategyGivesDdpsWeightsBitForBit) {
  config::TrainConfig base = parity_config("true");
  base.training.precision = GetParam().substr(0, 4);
  if (GetParam() == "bf16_reduce_bf16") base.training.reduce_dtype = "bf16";
  const Tensor ddp = train(base);
  EXPECT_TRUE(same_on_every_rank(ddp));
  expect_every_strategy_gives(ddp, base);
}

INSTANTIATE_TEST_SUITE_P(Precisions, StrategyParityMixedMpi,
                         ::testing::Values("bf16", "fp16", "bf16_reduce_bf16"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace braid::train

int main(int argc, char** argv) {
  return braid::train::mpi_test_main(argc, argv);
}
