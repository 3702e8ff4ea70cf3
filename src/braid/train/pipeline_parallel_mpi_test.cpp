// Pipeline parallelism as real processes under mpirun, against one process (the thread-rank
// version: pipeline_parity_test.cpp): every schedule over all ranks as stages and, on 4 ranks,
// dp2 x pp2 (ZeRO-1, ZeRO-2 under zb_h1, ZeRO-3 and FSDP FULL_SHARD) and tp2 x pp2; on 8, dp2 x pp2
// x tp2 (ZeRO-2, ZeRO-3). Every rank gathers the same weights.
#include <gtest/gtest.h>

#include "testing/train/mpi_test_world.h"
#include "testing/train/pipeline_parity_util.h"

namespace braid::train {
namespace {

PipelineLayout make(int pp, const std::string& schedule, int chunks, int tp = 1,
                    const std::string& strategy = "none") {
  PipelineLayout l;
  l.pp = pp;
  l.schedule = schedule;
  l.chunks = chunks;
  l.tp = tp;
  l.strategy = strategy;
  return l;
}

TEST(PipelineParallelMpi, WeightsMatchOneProcess) {
  const int n = mpi_test_world()->size();
  std::vector<PipelineLayout> layouts;
  if (n <= 4) {
    layouts = {make(n, "gpipe", 1), make(n, "1f1b", 1), make(n, "interleaved_1f1b", 2),
               make(n, "zb_h1", 1), make(n, "zb_v", 2)};
  }
  if (n == 4) {
    layouts.push_back(make(2, "1f1b", 1, 1, "zero1"));
    layouts.push_back(make(2, "zb_h1", 1, 1, "zero2"));
    layouts.push_back(make(2, "1f1b", 1, 1, "zero3"));
    layouts.push_back(make(2, "gpipe", 1, 1, "fsdp"));
    layouts.push_back(make(2, "interleaved_1f1b", 2, 2, "none"));
  }
  if (n == 8) {
    layouts.push_back(make(2, "1f1b", 1, 2, "zero2"));
    layouts.push_back(make(2, "1f1b", 1, 2, "zero3"));
  }
  for (const PipelineLayout& l : layouts) {
    const int dp = n / (l.pp * l.tp);
    Trainer t(pp_parity_config(l), mpi_test_world(), quiet());
    t.run();
    const Tensor w = t.gather_parameters();
    const std::string what = l.strategy + " pp=" + std::to_string(l.pp) + " " + l.schedule +
                             " tp=" + std::to_string(l.tp) + " rank " +
                             std::to_string(mpi_test_world()->rank());
    EXPECT_TRUE(
        weights_match(w, train_one(pp_reference_config(l.preset, dp)), 1e-4, deep_tiny(l.preset)))
        << what;
    EXPECT_TRUE(same_on_every_rank(w)) << what;
  }
}

}  // namespace
}  // namespace braid::train

int main(int argc, char** argv) {
  return braid::train::mpi_test_main(argc, argv);
}
