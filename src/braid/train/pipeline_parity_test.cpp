// Pipeline parallelism through the Trainer against one process (thread ranks): every schedule
// at pp 2 and 4 (v = 2 for interleaved), GPT-2 (tied embeddings) and LLaMA, and the 3-D mixes
// dp2 x pp2 (ZeRO-1), tp2 x pp2 (sequence parallel) on 4 ranks and dp2 x pp2 x tp2 (ZeRO-2) on
// 8. Each run trains 3 steps of 4 micro-batches with clipping on; its weights, gathered over
// every stage, match one process that reads the same global batches (1e-4 relative), and every
// rank gathers the same bits.
#include <gtest/gtest.h>

#include <ostream>

#include "braid/train/pipeline_parity_util.h"

namespace braid::train {
namespace {

struct PpCase {
  std::string name;
  int world;
  PipelineLayout layout;
};

void PrintTo(const PpCase& c, std::ostream* os) {
  *os << c.name;
}

class PipelineParity : public ::testing::TestWithParam<PpCase> {};

TEST_P(PipelineParity, WeightsMatchOneProcess) {
  const PpCase c = GetParam();
  const PipelineLayout& l = c.layout;
  const int dp = c.world / (l.pp * l.tp);
  const Tensor single = train_one(pp_reference_config(l.preset, dp));
  const TrainConfig cfg = pp_parity_config(l);
  std::vector<Tensor> out(static_cast<size_t>(c.world));
  std::vector<double> losses(static_cast<size_t>(c.world));
  testing::run_ranks(c.world, [&](comm::ProcessGroup& pg) {
    Trainer t(cfg, borrow(pg), quiet());
    losses[static_cast<size_t>(pg.rank())] = t.run().last_loss;
    out[static_cast<size_t>(pg.rank())] = t.gather_parameters();
  });
  for (int r = 0; r < c.world; ++r) {
    EXPECT_TRUE(weights_match(out[static_cast<size_t>(r)], single, 1e-4, deep_tiny(l.preset)))
        << c.name << " rank " << r;
    EXPECT_TRUE(testing::all_close(out[static_cast<size_t>(r)], out[0], 0, 0)) << "rank " << r;
    EXPECT_EQ(losses[static_cast<size_t>(r)], losses[0]) << "every rank reports the loss";
  }
}

PipelineLayout layout(const std::string& preset, int pp, const std::string& schedule,
                      int chunks = 1) {
  PipelineLayout l;
  l.preset = preset;
  l.pp = pp;
  l.schedule = schedule;
  l.chunks = chunks;
  return l;
}

PipelineLayout mixed(int pp, int tp, bool sp, const std::string& strategy) {
  PipelineLayout l = layout("gpt2-tiny", pp, "1f1b");
  l.tp = tp;
  l.sp = sp;
  l.strategy = strategy;
  return l;
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, PipelineParity,
    ::testing::Values(PpCase{"gpt2_pp2_gpipe", 2, layout("gpt2-tiny", 2, "gpipe")},
                      PpCase{"gpt2_pp2_1f1b", 2, layout("gpt2-tiny", 2, "1f1b")},
                      PpCase{"gpt2_pp2_interleaved", 2,
                             layout("gpt2-tiny", 2, "interleaved_1f1b", 2)},
                      PpCase{"gpt2_pp4_gpipe", 4, layout("gpt2-tiny", 4, "gpipe")},
                      PpCase{"gpt2_pp4_1f1b", 4, layout("gpt2-tiny", 4, "1f1b")},
                      PpCase{"gpt2_pp4_interleaved", 4,
                             layout("gpt2-tiny", 4, "interleaved_1f1b", 2)},
                      PpCase{"llama_pp2_interleaved", 2,
                             layout("llama-tiny", 2, "interleaved_1f1b", 2)},
                      PpCase{"dp2_pp2_zero1", 4, mixed(2, 1, false, "zero1")},
                      PpCase{"tp2_pp2_sp", 4, mixed(2, 2, true, "none")},
                      PpCase{"dp2_pp2_tp2_zero2", 8, mixed(2, 2, false, "zero2")}),
    [](const ::testing::TestParamInfo<PpCase>& i) { return i.param.name; });

}  // namespace
}  // namespace braid::train
