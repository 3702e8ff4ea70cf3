// DDP parity as real processes under mpirun: every rank trains with DDP (micro-batch b), then
// trains alone with batch N b (strategy none) and compares; a second DDP run must be
// bit-identical. Any failing rank fails the test (scripts/mpirun-test.sh).
#include <gtest/gtest.h>

#include "testing/tensor_compare.h"
#include "testing/train/ddp_parity_util.h"
#include "testing/train/mpi_test_world.h"

namespace braid::train {
namespace {

Tensor train_ddp(const config::TrainConfig& cfg) {
  Trainer t(cfg, mpi_test_world(), quiet());
  t.run();
  return t.model().flat().params().clone();
}

TEST(DdpParityMpi, RanksMatchOneProcessAndRerunsAreBitIdentical) {
  const int n = mpi_test_world()->size();
  Tensor ddp = train_ddp(tiny(2, 1, "ddp"));
  Tensor single = train_one(tiny(2 * n, 1, "none"));
  EXPECT_TRUE(weights_match(ddp, single)) << "rank " << mpi_test_world()->rank();
  Tensor again = train_ddp(tiny(2, 1, "ddp"));
  EXPECT_TRUE(braid::testing::bit_equal(again, ddp)) << "rank " << mpi_test_world()->rank();
}

TEST(DdpParityMpi, AccumulationUnderDdpMatchesTheBigBatch) {
  const int n = mpi_test_world()->size();
  Tensor ddp = train_ddp(tiny(1, 3, "ddp"));
  Tensor single = train_one(tiny(3 * n, 1, "none"));
  EXPECT_TRUE(weights_match(ddp, single)) << "rank " << mpi_test_world()->rank();
}

}  // namespace
}  // namespace braid::train

int main(int argc, char** argv) {
  return braid::train::mpi_test_main(argc, argv);
}
