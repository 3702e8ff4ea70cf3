// Training checkpoints of tensor-, pipeline-, context-parallel and 3-D runs (Note [Placements],
// Note [Resharding reads]): stopped and resumed at the same layout they equal the straight run bit
// for bit (weights and the next checkpoint); saved under one layout they load under any other,
// saving again at once gives the same bits, and the next steps match the straight run to fp32
// tolerance.
#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>

#include "testing/train/checkpoint_test_util.h"
#include "testing/train/pipeline_parity_util.h"

namespace braid::train {
namespace {

namespace fs = std::filesystem;

struct Layout {
  std::string name;
  int ranks;
  std::string strategy;
  int tp = 1, pp = 1;
  std::string schedule = "1f1b";
  int cp = 1;
  std::string cp_mode = "ring";
  bool deep = false;  // the 8-layer GPT-2 (zb_v's 2 x pp virtual stages need a block each)
};

void PrintTo(const Layout& l, std::ostream* os) {
  *os << l.name;
}

void apply(const Layout& l, config::TrainConfig& c) {
  c.parallel.strategy = l.strategy;
  c.parallel.tensor_parallel_size = l.tp;
  c.parallel.pipeline_parallel_size = l.pp;
  c.parallel.pipeline_schedule = l.schedule;
  c.parallel.context_parallel_size = l.cp;
  c.parallel.context_parallel_mode = l.cp_mode;
  if (l.deep) {
    c.model.preset = "";
    c.model.config = deep_tiny_config("gpt2-tiny");
  }
  // A pipeline reduces once per step (Note [Pipeline reduction]): the same accumulation order
  // everywhere keeps layouts comparable.
  c.parallel.sync_each_batch = "false";
}

class LayoutResume : public ::testing::TestWithParam<Layout> {};

// Note [Resume setting] at the layout: resumed after its step-2 checkpoint, the run ends with
// the straight run's bits (expect_resume_bit_identical).
TEST_P(LayoutResume, StoppedAndResumedRunEqualsTheStraightRunBitForBit) {
  const Layout& l = GetParam();
  expect_resume_bit_identical(l.ranks, private_temp_dir("braid_layout_resume_" + l.name),
                              [&l](config::TrainConfig& c) { apply(l, c); });
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, LayoutResume,
    ::testing::Values(Layout{"tp2", 2, "none", 2}, Layout{"dp2_tp2_zero1", 4, "zero1", 2},
                      Layout{"pp2", 2, "none", 1, 2}, Layout{"pp2_gpipe", 2, "none", 1, 2, "gpipe"},
                      Layout{"pp2_zb_v", 2, "none", 1, 2, "zb_v", 1, "ring", true},
                      Layout{"pp2_tp2", 4, "none", 2, 2}, Layout{"dp2_pp2_zero3", 4, "zero3", 1, 2},
                      Layout{"dp2_pp2_tp2_zero2", 8, "zero2", 2, 2},
                      Layout{"cp2", 2, "none", 1, 1, "1f1b", 2},
                      Layout{"dp2_cp2_zero3_ulysses", 4, "zero3", 1, 1, "1f1b", 2, "ulysses"}),
    [](const auto& info) { return info.param.name; });

// Saved under `from` at step 2 and loaded under `to`: saving again at once gives the same bits,
// and training on to step 4 matches `from`'s straight run to fp32 tolerance.
void expect_loads(const Layout& from, const Layout& to, const std::string& preset = "gpt2-tiny") {
  SCOPED_TRACE(from.name + " -> " + to.name + " (" + preset + ")");
  const fs::path root =
      private_temp_dir("braid_layout_reshard_" + preset + from.name + "_" + to.name);
  fs::remove_all(root);
  config::TrainConfig base = resume_config((root / "from").string());
  if (preset != "gpt2-tiny") {
    base.model.preset = preset;
    base.model.freeze = "";  // GPT-2's names
  }
  base.training.global_batch_size = 4;
  base.training.micro_batch_size = 1;
  base.training.gradient_accumulation_steps = 0;  // derived per data-parallel size
  config::TrainConfig a = base;
  apply(from, a);
  const Tensor straight = train_ranks(from.ranks, a);
  const fs::path saved = root / "from" / checkpoint::step_dir_name(2);
  config::TrainConfig b = base;
  apply(to, b);
  b.training.resume = saved.string();
  b.checkpoint.dir = (root / "to").string();
  Tensor out;
  std::mutex mu;
  braid::testing::run_ranks(to.ranks, [&](comm::ProcessGroup& pg) {
    Trainer t(b, borrow(pg), quiet());
    EXPECT_EQ(t.start_step(), 2);
    t.save_checkpoint(2);  // what was loaded, saved by this layout
    Tensor w = train_and_gather(t);
    std::lock_guard<std::mutex> lock(mu);
    if (pg.rank() == 0) out = w;
  });
  EXPECT_TRUE(same_checkpoint_contents(root / "to" / checkpoint::step_dir_name(2), saved));
  EXPECT_EQ(from.deep, to.deep);
  EXPECT_TRUE(weights_match(out, straight, 1e-5,
                            from.deep ? deep_tiny(preset) : nn::ModelConfig::preset(preset)));
}

TEST(LayoutReshard, TensorAndPipelineCheckpointsLoadUnderAnyLayout) {
  const Layout one{"one", 1, "none"}, dp2_tp2{"dp2_tp2", 4, "ddp", 2}, pp2{"pp2", 2, "none", 1, 2},
      pp2_tp2{"pp2_tp2", 4, "none", 2, 2}, zero1x4{"zero1_x4", 4, "zero1"},
      three_d{"dp2_pp2_tp2_zero3", 8, "zero3", 2, 2}, tp2{"tp2", 2, "none", 2};
  expect_loads(dp2_tp2, pp2);
  expect_loads(pp2_tp2, zero1x4);
  expect_loads(three_d, one);
  expect_loads(one, three_d);
  expect_loads(zero1x4, tp2);
  // LLaMA: untied head, and at tp 4 each of the 2 kv heads is held by 2 ranks (one copy saved).
  const Layout tp4{"tp4", 4, "none", 4};
  expect_loads(tp4, pp2_tp2, "llama-tiny");
  expect_loads(pp2, tp4, "llama-tiny");
  // zb_v's V places the chunks otherwise (the first stage holds both ends, no replica); on the
  // 8-layer GPT-2.
  const Layout pp2_zb_v{"pp2_zb_v", 2, "none", 1, 2, "zb_v", 1, "ring", true},
      pp2_deep{"pp2_deep", 2, "none", 1, 2, "1f1b", 1, "ring", true},
      zero1x2_deep{"zero1_x2_deep", 2, "zero1", 1, 1, "1f1b", 1, "ring", true};
  expect_loads(pp2_deep, pp2_zb_v);
  expect_loads(pp2_zb_v, zero1x2_deep);
}

// Context parallelism changes no placement: its checkpoints are data-parallel ones over dp x cp
// and load under any layout, and any checkpoint loads under it.
TEST(LayoutReshard, ContextParallelCheckpointsLoadUnderAnyLayout) {
  const Layout one{"one", 1, "none"}, tp2{"tp2", 2, "none", 2},
      dp2_cp2{"dp2_cp2_zero3", 4, "zero3", 1, 1, "1f1b", 2},
      cp2_tp2{"cp2_tp2", 4, "none", 2, 1, "1f1b", 2};
  expect_loads(dp2_cp2, one);
  expect_loads(tp2, dp2_cp2);
  expect_loads(dp2_cp2, cp2_tp2, "llama-tiny");
}

}  // namespace
}  // namespace braid::train
