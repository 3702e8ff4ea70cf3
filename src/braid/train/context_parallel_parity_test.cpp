// Context parallelism through the Trainer against one process (thread ranks): cp 2 and 4 alone,
// ring and Ulysses, and beside every other dimension of the plan (dp x cp under DDP, ZeRO-1/3
// and FSDP, which reduce and shard over dp x cp; tp x cp with sequence parallelism; pp x cp).
// Each run trains 3 steps of 2 micro-batches with clipping on; its weights match one process
// that reads the same global batches (1e-4 relative), every rank gathers the same bits, and
// the loss it reports (each cp rank's share summed) is one process's.
#include <gtest/gtest.h>

#include "testing/train/checkpoint_test_util.h"
#include "testing/train/context_parallel_parity_util.h"
#include "testing/train/strategy_parity_util.h"

namespace braid::train {
namespace {

using CpCase = CpLayout;

class ContextParallelTraining : public ::testing::TestWithParam<CpCase> {};

TEST_P(ContextParallelTraining, WeightsAndLossMatchOneProcess) {
  const CpCase c = GetParam();
  const config::TrainConfig one = cp_reference_config(c);
  TrainResult want;
  Tensor single;
  {
    Trainer t(one, nullptr, quiet());
    want = t.run();
    single = t.gather_parameters();
  }
  const config::TrainConfig cfg = cp_parity_config(c);
  std::vector<Tensor> out(static_cast<size_t>(c.world));
  std::vector<TrainResult> results(static_cast<size_t>(c.world));
  testing::run_ranks(c.world, [&](comm::ProcessGroup& pg) {
    Trainer t(cfg, borrow(pg), quiet());
    results[static_cast<size_t>(pg.rank())] = t.run();
    out[static_cast<size_t>(pg.rank())] = t.gather_parameters();
  });
  const nn::ModelConfig mc = nn::ModelConfig::preset(c.preset);
  for (int r = 0; r < c.world; ++r) {
    const TrainResult& got = results[static_cast<size_t>(r)];
    EXPECT_TRUE(weights_match(out[static_cast<size_t>(r)], single, 1e-4, mc))
        << c.name << " rank " << r;
    EXPECT_TRUE(testing::all_close(out[static_cast<size_t>(r)], out[0], 0, 0)) << "rank " << r;
    EXPECT_NEAR(got.first_loss, want.first_loss, 1e-5 * want.first_loss) << "rank " << r;
    EXPECT_NEAR(got.last_loss, want.last_loss, 1e-4 * want.last_loss) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ContextParallelTraining,
    ::testing::Values(
        CpCase{"gpt2_cp2_ring", 2}, CpCase{"gpt2_cp4_ring", 4, "gpt2-tiny", 4},
        CpCase{"llama_cp2_ring", 2, "llama-tiny"},
        CpCase{"llama_cp2_ulysses", 2, "llama-tiny", 2, "ulysses"},
        CpCase{"gpt2_cp4_ulysses", 4, "gpt2-tiny", 4, "ulysses"},
        CpCase{"dp2_cp2_ddp", 4, "gpt2-tiny", 2, "ring", "ddp"},
        CpCase{"dp2_cp2_zero1", 4, "llama-tiny", 2, "ring", "zero1"},
        CpCase{"dp2_cp2_zero3", 4, "gpt2-tiny", 2, "ring", "zero3"},
        CpCase{"dp2_cp2_fsdp_ulysses", 4, "llama-tiny", 2, "ulysses", "fsdp"},
        CpCase{"tp2_cp2_sp_ring", 4, "llama-tiny", 2, "ring", "none", "FULL_SHARD", 2, true},
        CpCase{"tp2_cp2_ulysses", 4, "gpt2-tiny", 2, "ulysses", "none", "FULL_SHARD", 2},
        CpCase{"pp2_cp2_ring", 4, "gpt2-tiny", 2, "ring", "none", "FULL_SHARD", 1, false, 2}),
    [](const ::testing::TestParamInfo<CpCase>& i) { return i.param.name; });

// Evaluation splits its sequences too: the validation loss (each cp rank's tokens summed, over
// the whole count) is one process's, before and after training, on real token shards.
TEST(ContextParallelTraining, EvaluationMatchesOneProcess) {
  const CpLayout l{"dp2_cp2_eval", 4, "gpt2-tiny", 2, "ring", "zero1"};
  auto with_data = [](config::TrainConfig c) {
    c.data.random_tokens = false;
    c.data.train = resume_data_dir();
    c.training.eval_interval = 3;
    c.training.eval_batches = 2;
    return c;
  };
  Trainer one(with_data(cp_reference_config(l)), nullptr, quiet());
  const TrainResult want = one.run();
  ASSERT_TRUE(std::isfinite(want.first_val_loss));
  const config::TrainConfig cfg = with_data(cp_parity_config(l));
  testing::run_ranks(l.world, [&](comm::ProcessGroup& pg) {
    Trainer t(cfg, borrow(pg), quiet());
    const TrainResult got = t.run();
    EXPECT_NEAR(got.first_val_loss, want.first_val_loss, 1e-5 * want.first_val_loss);
    EXPECT_NEAR(got.last_val_loss, want.last_val_loss, 1e-4 * want.last_val_loss);
  });
}

// The keys a sequence split refuses, on every rank, before anything runs.
TEST(ContextParallelTraining, BadSplitsFailOnEveryRankNamingTheKeys) {
  CpCase c{"bad", 4, "gpt2-tiny", 4};
  config::TrainConfig cfg = cp_parity_config(c);
  cfg.data.seq_len = 12;  // not a multiple of 2 x 4
  auto errors = testing::run_ranks_collect(
      4, [&](comm::ProcessGroup& pg) { Trainer t(cfg, borrow(pg), quiet()); });
  for (const auto& e : errors)
    EXPECT_NE(testing::what(e).find("data.seq_len 12 does not split over "
                                    "parallel.context_parallel_size 4 with "
                                    "parallel.context_parallel_mode ring: its zig-zag split needs "
                                    "a multiple of 2 x context_parallel_size = 8"),
              std::string::npos)
        << testing::what(e);
  cfg.data.seq_len = 16;
  cfg.parallel.context_parallel_mode = "ulysses";
  cfg.model.preset = "llama-tiny";  // 2 key/value heads over 4 ranks
  errors = testing::run_ranks_collect(
      4, [&](comm::ProcessGroup& pg) { Trainer t(cfg, borrow(pg), quiet()); });
  for (const auto& e : errors)
    EXPECT_NE(testing::what(e).find("model.n_head 4 and model.n_kv_head 2 must both divide"),
              std::string::npos)
        << testing::what(e);
  cfg.parallel.context_parallel_mode = "rings";
  errors = testing::run_ranks_collect(
      4, [&](comm::ProcessGroup& pg) { Trainer t(cfg, borrow(pg), quiet()); });
  for (const auto& e : errors)
    EXPECT_NE(testing::what(e).find("'parallel.context_parallel_mode' is 'rings', expected one "
                                    "of: ring, ulysses"),
              std::string::npos)
        << testing::what(e);
  cfg.parallel.context_parallel_mode = "ring";
  cfg.parallel.context_parallel_size = 3;  // does not divide 4 ranks
  errors = testing::run_ranks_collect(
      4, [&](comm::ProcessGroup& pg) { Trainer t(cfg, borrow(pg), quiet()); });
  for (const auto& e : errors)
    EXPECT_NE(testing::what(e).find("parallel.context_parallel_size 3 does not divide the 4 "
                                    "launched rank(s)"),
              std::string::npos)
        << testing::what(e);
}

}  // namespace
}  // namespace braid::train
