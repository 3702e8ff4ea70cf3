// Tensor parallelism as real processes under mpirun, against one process (the thread-rank
// version: tensor_parallel_parity_test.cpp): tp = world (with and without sequence
// parallelism) and, on 4 ranks, dp2 x tp2 under DDP and ZeRO-3 and LLaMA over tp 4. Every rank
// gathers the same weights.
#include <gtest/gtest.h>

#include "testing/train/mpi_test_world.h"
#include "testing/train/tensor_parallel_parity_util.h"

namespace braid::train {
namespace {

struct Layout {
  std::string preset;
  int tp;
  bool sp;
  std::string strategy;
};

TEST(TensorParallelMpi, WeightsMatchOneProcess) {
  const int n = mpi_test_world()->size();
  std::vector<Layout> layouts = {{"gpt2-tiny", n, false, "none"}, {"gpt2-tiny", n, true, "none"}};
  if (n == 4) {
    layouts.push_back({"gpt2-tiny", 2, false, "ddp"});
    layouts.push_back({"gpt2-tiny", 2, true, "zero3"});
    layouts.push_back({"llama-tiny", 4, true, "none"});
  }
  for (const Layout& l : layouts) {
    const int dp = n / l.tp;
    Trainer t(tp_parity_config(l.preset, l.tp, l.sp, l.strategy), mpi_test_world(), quiet());
    t.run();
    const Tensor w = t.gather_parameters();
    const std::string what = l.preset + " " + l.strategy + " tp=" + std::to_string(l.tp) +
                             (l.sp ? " sp" : "") + " rank " +
                             std::to_string(mpi_test_world()->rank());
    EXPECT_TRUE(weights_match(w, train_one(tp_reference_config(l.preset, dp)), 1e-4, l.preset))
        << what;
    EXPECT_TRUE(same_on_every_rank(w)) << what;
  }
}

}  // namespace
}  // namespace braid::train

int main(int argc, char** argv) {
  return braid::train::mpi_test_main(argc, argv);
}
