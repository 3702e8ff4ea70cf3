// Context parallelism as real processes under mpirun, against one process (the thread-rank
// version: context_parallel_parity_test.cpp): cp = world, ring and Ulysses, and on 4 ranks
// dp2 x cp2 under ZeRO-3 and tp2 x cp2 with sequence parallelism. Every rank gathers the same
// weights and reports one process's loss.
#include <gtest/gtest.h>

#include "testing/train/context_parallel_parity_util.h"
#include "testing/train/mpi_test_world.h"

namespace braid::train {
namespace {

TEST(ContextParallelMpi, WeightsAndLossMatchOneProcess) {
  const int n = mpi_test_world()->size();
  std::vector<CpLayout> layouts = {{"gpt2 ring", n, "gpt2-tiny", n, "ring"},
                                   {"llama ulysses", n, "llama-tiny", n, "ulysses"}};
  if (n == 4) {
    layouts.resize(1);  // llama-tiny's 2 key/value heads do not split over 4
    layouts.push_back({"dp2 x cp2 zero3", 4, "gpt2-tiny", 2, "ring", "zero3"});
    layouts.push_back({"tp2 x cp2 sp", 4, "llama-tiny", 2, "ring", "none", "FULL_SHARD", 2, true});
  }
  for (const CpLayout& l : layouts) {
    Trainer t(cp_parity_config(l), mpi_test_world(), quiet());
    const TrainResult got = t.run();
    const Tensor w = t.gather_parameters();
    Trainer one(cp_reference_config(l), nullptr, quiet());
    const TrainResult want = one.run();
    const std::string what = l.name + " rank " + std::to_string(mpi_test_world()->rank());
    EXPECT_TRUE(weights_match(w, one.gather_parameters(), 1e-4, l.preset)) << what;
    EXPECT_TRUE(same_on_every_rank(w)) << what;
    EXPECT_NEAR(got.last_loss, want.last_loss, 1e-4 * want.last_loss) << what;
  }
}

}  // namespace
}  // namespace braid::train

int main(int argc, char** argv) {
  return braid::train::mpi_test_main(argc, argv);
}
