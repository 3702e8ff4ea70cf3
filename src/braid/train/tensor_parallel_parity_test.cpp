// Tensor parallelism through the Trainer against one process (thread ranks): tp alone, with
// sequence parallelism, and dp2 x tp2 on 4 ranks under DDP and ZeRO, GPT-2 and LLaMA. Each run
// trains 4 steps (accumulation 2, clipping on: the tiny model's norm is above the limit, so the
// model-parallel norm decides the coefficient) and its exported weights, gathered over tp,
// match one process that reads the same global batches (1e-4 relative: the tp reductions add
// partial sums in another order than one GEMM does).
#include <gtest/gtest.h>

#include <ostream>

#include "testing/train/tensor_parallel_parity_util.h"

namespace braid::train {
namespace {

struct TpCase {
  std::string name;
  std::string preset;
  int world;
  int tp;
  bool sp;
  std::string strategy;
};

void PrintTo(const TpCase& c, std::ostream* os) {
  *os << c.name;
}

class TensorParallelParity : public ::testing::TestWithParam<TpCase> {};

TEST_P(TensorParallelParity, WeightsMatchOneProcess) {
  const TpCase c = GetParam();
  const int dp = c.world / c.tp;
  const Tensor single = train_one(tp_reference_config(c.preset, dp));
  const config::TrainConfig cfg = tp_parity_config(c.preset, c.tp, c.sp, c.strategy);
  std::vector<Tensor> out(static_cast<size_t>(c.world));
  testing::run_ranks(c.world, [&](comm::ProcessGroup& pg) {
    Trainer t(cfg, borrow(pg), quiet());
    t.run();
    out[static_cast<size_t>(pg.rank())] = t.gather_parameters();
  });
  for (int r = 0; r < c.world; ++r) {
    EXPECT_TRUE(weights_match(out[static_cast<size_t>(r)], single, 1e-4, c.preset))
        << c.name << " rank " << r;
    // Every rank gathers the same bits.
    EXPECT_TRUE(testing::all_close(out[static_cast<size_t>(r)], out[0], 0, 0)) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, TensorParallelParity,
    ::testing::Values(TpCase{"gpt2_tp2", "gpt2-tiny", 2, 2, false, "none"},
                      TpCase{"gpt2_tp2_sp", "gpt2-tiny", 2, 2, true, "none"},
                      TpCase{"gpt2_dp2_tp2_ddp", "gpt2-tiny", 4, 2, false, "ddp"},
                      TpCase{"gpt2_dp2_tp2_sp_zero3", "gpt2-tiny", 4, 2, true, "zero3"},
                      TpCase{"gpt2_dp2_tp2_zero1", "gpt2-tiny", 4, 2, false, "zero1"},
                      TpCase{"llama_tp4_sp", "llama-tiny", 4, 4, true, "none"},
                      TpCase{"llama_dp2_tp2_zero2", "llama-tiny", 4, 2, false, "zero2"}),
    [](const ::testing::TestParamInfo<TpCase>& i) { return i.param.name; });

TEST(TensorParallelErrors, BadLayoutsNameTheKey) {
  config::TrainConfig c = tiny(2, 1, "ddp");
  c.parallel.tensor_parallel_size = 4;
  for (const std::string& e : construction_errors(2, c))
    EXPECT_NE(e.find("parallel.tensor_parallel_size 4 is larger than the 2 launched rank(s)"),
              std::string::npos)
        << e;
  c.parallel.tensor_parallel_size = 2;
  for (const std::string& e : construction_errors(3, c))
    EXPECT_NE(e.find("parallel.tensor_parallel_size 2 does not divide the 3 launched rank(s)"),
              std::string::npos)
        << e;
  c.model.preset = "gpt2-tiny";
  c.parallel.tensor_parallel_size = 3;
  for (const std::string& e : construction_errors(3, c))
    EXPECT_NE(e.find("n_head 4 is not divisible by parallel.tensor_parallel_size 3"),
              std::string::npos)
        << e;
  c.parallel.tensor_parallel_size = 1;
  c.parallel.sequence_parallel = true;
  for (const std::string& e : construction_errors(1, c))
    EXPECT_NE(e.find("parallel.sequence_parallel is true but parallel.tensor_parallel_size is 1"),
              std::string::npos)
        << e;
}

}  // namespace
}  // namespace braid::train
