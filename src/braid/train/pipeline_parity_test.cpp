// Pipeline parallelism through the Trainer against one process (thread ranks): every schedule
// at pp 2 and 4 (v = 2 for interleaved), GPT-2 (tied embeddings) and LLaMA, zb_h1 also under
// DDP, ZeRO-2 and tp2 x pp2 (and bit for bit equal to 1f1b), and the 3-D mixes
// dp2 x pp2 (ZeRO-1), tp2 x pp2 (sequence parallel) on 4 ranks and dp2 x pp2 x tp2 (ZeRO-2) on
// 8. Each run trains 3 steps of 4 micro-batches with clipping on; its weights, gathered over
// every stage, match one process that reads the same global batches (1e-4 relative), and every
// rank gathers the same bits.
#include <gtest/gtest.h>

#include <ostream>

#include "testing/train/pipeline_parity_util.h"
#include "testing/train/strategy_parity_util.h"

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
  const config::TrainConfig cfg = pp_parity_config(l);
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

PipelineLayout mixed(int pp, int tp, bool sp, const std::string& strategy,
                     const std::string& sharding = "FULL_SHARD", int sharding_factor = 0) {
  PipelineLayout l = layout("gpt2-tiny", pp, "1f1b");
  l.tp = tp;
  l.sp = sp;
  l.strategy = strategy;
  l.sharding = sharding;
  l.sharding_factor = sharding_factor;
  return l;
}

PipelineLayout zb_h1(PipelineLayout l) {
  l.schedule = "zb_h1";
  return l;
}

PipelineLayout zb_v(PipelineLayout l) {
  l.schedule = "zb_v";
  return l;
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, PipelineParity,
    ::testing::Values(
        PpCase{"gpt2_pp2_gpipe", 2, layout("gpt2-tiny", 2, "gpipe")},
        PpCase{"gpt2_pp2_1f1b", 2, layout("gpt2-tiny", 2, "1f1b")},
        PpCase{"gpt2_pp2_interleaved", 2, layout("gpt2-tiny", 2, "interleaved_1f1b", 2)},
        PpCase{"gpt2_pp4_gpipe", 4, layout("gpt2-tiny", 4, "gpipe")},
        PpCase{"gpt2_pp4_1f1b", 4, layout("gpt2-tiny", 4, "1f1b")},
        PpCase{"gpt2_pp4_interleaved", 4, layout("gpt2-tiny", 4, "interleaved_1f1b", 2)},
        PpCase{"llama_pp2_interleaved", 2, layout("llama-tiny", 2, "interleaved_1f1b", 2)},
        PpCase{"gpt2_pp2_zb_h1", 2, layout("gpt2-tiny", 2, "zb_h1")},
        PpCase{"gpt2_pp4_zb_h1", 4, layout("gpt2-tiny", 4, "zb_h1")},
        PpCase{"llama_pp2_zb_h1", 2, layout("llama-tiny", 2, "zb_h1")},
        PpCase{"dp2_pp2_ddp_zb_h1", 4, zb_h1(mixed(2, 1, false, "ddp"))},
        PpCase{"dp2_pp2_zero2_zb_h1", 4, zb_h1(mixed(2, 1, false, "zero2"))},
        PpCase{"tp2_pp2_sp_zb_h1", 4, zb_h1(mixed(2, 2, true, "none"))},
        PpCase{"gpt2_pp2_zb_v", 2, layout("gpt2-tiny", 2, "zb_v")},
        PpCase{"gpt2_pp4_zb_v", 4, layout("gpt2-tiny", 4, "zb_v")},
        PpCase{"dp2_pp2_zero2_zb_v", 4, zb_v(mixed(2, 1, false, "zero2"))},
        PpCase{"dp2_pp2_zero1", 4, mixed(2, 1, false, "zero1")},
        PpCase{"tp2_pp2_sp", 4, mixed(2, 2, true, "none")},
        PpCase{"dp2_pp2_tp2_zero2", 8, mixed(2, 2, false, "zero2")},
        // Parameters sharded per unit under a pipeline (stage 3 calls the schedule's hooks).
        PpCase{"dp2_pp2_zero3", 4, mixed(2, 1, false, "zero3")},
        PpCase{"dp2_pp2_fsdp_full_shard", 4, mixed(2, 1, false, "fsdp")},
        PpCase{"dp2_pp2_fsdp_shard_grad_op", 4, mixed(2, 1, false, "fsdp", "SHARD_GRAD_OP")},
        PpCase{"dp4_pp2_fsdp_hybrid_shard", 8, mixed(2, 1, false, "fsdp", "HYBRID_SHARD", 2)},
        PpCase{"dp2_pp2_tp2_zero3", 8, mixed(2, 2, false, "zero3")},
        PpCase{"dp2_pp2_tp2_fsdp_full_shard", 8, mixed(2, 2, false, "fsdp")}),
    [](const ::testing::TestParamInfo<PpCase>& i) { return i.param.name; });

// ZB-H1's split backward accumulates every parameter's gradient in 1F1B's order (Note [Split
// backward]): the same weights as 1f1b bit for bit, alone, under DDP and ZeRO-1/2 (the hooks run
// around each B and W), with tensor parallelism, and with activation checkpointing (the
// checkpointed blocks' inner backwards split too).
TEST(PipelineParity, ZbH1EqualsOneFOneBBitForBit) {
  struct Case {
    int world;
    PipelineLayout layout;
    std::string checkpointing = "none";
  };
  for (const Case& c :
       {Case{2, layout("gpt2-tiny", 2, "1f1b")}, Case{4, layout("gpt2-tiny", 4, "1f1b")},
        Case{2, layout("llama-tiny", 2, "1f1b"), "full"}, Case{4, mixed(2, 1, false, "ddp")},
        Case{4, mixed(2, 1, false, "zero1")}, Case{4, mixed(2, 1, false, "zero2")},
        Case{4, mixed(2, 2, true, "none")}}) {
    auto weights = [&](const PipelineLayout& l) {
      config::TrainConfig cfg = pp_parity_config(l);
      cfg.model.activation_checkpointing = c.checkpointing;
      return train_ranks(c.world, cfg);
    };
    EXPECT_TRUE(testing::all_close(weights(zb_h1(c.layout)), weights(c.layout), 0, 0))
        << c.layout.preset << " pp " << c.layout.pp << " tp " << c.layout.tp << " "
        << c.layout.strategy << " checkpointing " << c.checkpointing;
  }
}

// Under a pipeline every data-parallel strategy reduces each gradient once, after the schedule
// (Note [Pipeline reduction]), in the same rank order: ZeRO-2, ZeRO-3 and every FSDP sharding
// strategy end bit-identical to ZeRO-1 at the same layout (dp2 x pp2, dp2 x pp2 x tp2, and
// HYBRID_SHARD's 2 x 2 shard groups against zero1 over the same dp4 x pp2).
TEST(PipelineParity, ShardedStrategiesEqualZero1BitForBit) {
  auto weights = [](int world, const PipelineLayout& l) {
    return train_ranks(world, pp_parity_config(l));
  };
  struct Layout {
    int world, tp;
    std::vector<std::pair<std::string, std::string>> strategies;
    int sharding_factor = 0;
  };
  const std::vector<Layout> layouts = {{4,
                                        1,
                                        {{"zero2", ""},
                                         {"zero3", ""},
                                         {"fsdp", "FULL_SHARD"},
                                         {"fsdp", "SHARD_GRAD_OP"},
                                         {"fsdp", "HYBRID_SHARD_ZERO2"}}},
                                       {8, 2, {{"zero3", ""}, {"fsdp", "SHARD_GRAD_OP"}}},
                                       {8, 1, {{"fsdp", "HYBRID_SHARD"}}, 2}};
  for (const Layout& l : layouts) {
    const Tensor zero1 = weights(l.world, mixed(2, l.tp, false, "zero1"));
    for (const auto& [name, how] : l.strategies) {
      const Tensor w = weights(l.world, mixed(2, l.tp, false, name,
                                              how.empty() ? "FULL_SHARD" : how, l.sharding_factor));
      EXPECT_TRUE(testing::all_close(w, zero1, 0, 0))
          << name << " " << how << " on " << l.world << " ranks (tp " << l.tp << ")";
    }
  }
}

// Offload composes with tensor and pipeline parallelism: each rank's optimizer state (and stage
// 3's parameter shards) in its own file, the norm counting each parameter once over the model-
// parallel ranks, and the weights bit-identical to the same layout in memory.
TEST(PipelineParity, OffloadComposesWithTensorAndPipelineParallelism) {
  auto weights = [](int world, PipelineLayout l, const std::string& offload) {
    config::TrainConfig cfg = pp_parity_config(l);
    if (offload != "none") {
      cfg.parallel.offload_optimizer = "nvme";
      cfg.parallel.offload_params = offload == "params" ? "nvme" : "none";
      cfg.parallel.offload_dir = private_temp_dir("braid_offload_pp_test").string();
    }
    return train_ranks(world, cfg);
  };
  struct Case {
    int world, pp, tp;
    std::string strategy, offload;
  };
  for (const Case& c : {Case{4, 2, 1, "zero3", "params"}, Case{4, 2, 1, "zero2", "optimizer"},
                        Case{4, 1, 2, "zero3", "params"}, Case{4, 1, 2, "zero2", "optimizer"},
                        Case{8, 2, 2, "zero3", "params"}, Case{8, 2, 2, "zero1", "optimizer"}}) {
    const PipelineLayout l = mixed(c.pp, c.tp, false, c.strategy);
    EXPECT_TRUE(
        testing::all_close(weights(c.world, l, c.offload), weights(c.world, l, "none"), 0, 0))
        << c.strategy << " offload " << c.offload << " pp " << c.pp << " tp " << c.tp;
  }
}

// Every rank of a bad layout fails with one line naming the key, at construction or (for a
// schedule the micro-batches do not fit) at the first step, before any message is sent.
TEST(PipelineErrors, BadLayoutsNameTheKey) {
  auto expect_all = [](const std::vector<std::string>& errors, const std::string& want) {
    for (const std::string& e : errors) EXPECT_NE(e.find(want), std::string::npos) << e;
  };
  PipelineLayout l = layout("gpt2-tiny", 3, "1f1b");
  expect_all(construction_errors(3, pp_parity_config(l)),
             "n_layer 8 is not divisible by 3 pipeline stages (parallel.pipeline_parallel_size 3 "
             "x parallel.pipeline_virtual_stages 1); set parallel.pipeline_balance: parameters "
             "or time");
  l = layout("gpt2-tiny", 4, "interleaved_1f1b", 4);
  expect_all(construction_errors(4, pp_parity_config(l)),
             "= 16 pipeline stages but the model has 8 layers (n_layer): every stage needs a "
             "block");
  l = layout("gpt2-tiny", 4, "1f1b");
  expect_all(construction_errors(2, pp_parity_config(l)),
             "parallel.pipeline_parallel_size 4 is larger than the 2 launched rank(s)");
  l = mixed(2, 2, false, "none");
  expect_all(construction_errors(6, pp_parity_config(l)),
             "parallel.pipeline_parallel_size 2 x parallel.tensor_parallel_size 2 = 4 does not "
             "divide the 6 launched rank(s)");
  l = layout("gpt2-tiny", 2, "1f1b", 2);
  expect_all(construction_errors(2, pp_parity_config(l)),
             "parallel.pipeline_virtual_stages 2 needs parallel.pipeline_schedule: "
             "interleaved_1f1b");
  l = layout("gpt2-tiny", 2, "zb_h1", 2);
  expect_all(construction_errors(2, pp_parity_config(l)),
             "parallel.pipeline_virtual_stages 2 needs parallel.pipeline_schedule: "
             "interleaved_1f1b (zb_h1 runs one chunk per rank)");
  l = layout("gpt2-tiny", 2, "zb_v", 3);
  expect_all(construction_errors(2, pp_parity_config(l)),
             "parallel.pipeline_schedule: zb_v runs two chunks per rank (its V), but "
             "parallel.pipeline_virtual_stages is 3");
  // Sharded parameters are freed after B; W would need them.
  for (const std::string strategy : {"zero3", "fsdp"}) {
    expect_all(construction_errors(4, pp_parity_config(zb_h1(mixed(2, 1, false, strategy)))),
               "parallel.pipeline_schedule: zb_h1 does not run with sharded parameters");
    expect_all(construction_errors(4, pp_parity_config(zb_v(mixed(2, 1, false, strategy)))),
               "parallel.pipeline_schedule: zb_v does not run with sharded parameters");
  }
  config::TrainConfig c = pp_parity_config(layout("gpt2-tiny", 2, "1f1b"));
  c.parallel.pipeline_balance = "flops";
  expect_all(construction_errors(2, c),
             "config key 'parallel.pipeline_balance' is 'flops', expected one of: uniform, "
             "parameters, time");
  // Interleaving needs the micro-batches in groups of pp: 3 do not split over 2 stages.
  c = pp_parity_config(layout("gpt2-tiny", 2, "interleaved_1f1b", 2));
  c.training.gradient_accumulation_steps = 3;
  auto errors = testing::run_ranks_collect(2, [&](comm::ProcessGroup& pg) {
    Trainer t(c, borrow(pg), quiet());
    t.run();
  });
  for (auto& e : errors)
    EXPECT_NE(testing::what(e).find("needs training.gradient_accumulation_steps (3) to be a "
                                    "multiple of parallel.pipeline_parallel_size (2)"),
              std::string::npos)
        << testing::what(e);
}

// Fewer micro-batches than stages is fine for 1f1b, zb_h1 and zb_v (a shorter warm-up) and
// gpipe.
TEST(PipelineErrors, FewerMicroBatchesThanStagesStillMatchOneProcess) {
  for (const std::string schedule : {"1f1b", "gpipe", "zb_h1", "zb_v"}) {
    config::TrainConfig c = pp_parity_config(layout("gpt2-tiny", 4, schedule));
    c.training.gradient_accumulation_steps = 2;
    config::TrainConfig one = pp_reference_config("gpt2-tiny", 1);
    one.training.gradient_accumulation_steps = 2;
    const Tensor single = train_one(one);
    std::vector<Tensor> out(4);
    testing::run_ranks(4, [&](comm::ProcessGroup& pg) {
      Trainer t(c, borrow(pg), quiet());
      t.run();
      out[static_cast<size_t>(pg.rank())] = t.gather_parameters();
    });
    EXPECT_TRUE(weights_match(out[0], single, 1e-4, deep_tiny("gpt2-tiny"))) << schedule;
  }
}

}  // namespace
}  // namespace braid::train
