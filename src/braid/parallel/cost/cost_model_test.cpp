// The step-time model, the machine profile and the planner on a synthetic machine (exact
// numbers, no measurement): the formulas of Note [Step-time model] and Note [Plan ranking].
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "braid/parallel/cost/calibrate.h"
#include "braid/parallel/cost/machine_profile.h"
#include "braid/parallel/cost/planner.h"
#include "braid/parallel/cost/step_cost.h"
#include "testing/run_ranks.h"

namespace braid::parallel::cost {
namespace {

using braid::testing::error_of;

// A 4-core node: 100 GFLOP/s per rank alone on it, halved per doubling of ranks.
MachineProfile synthetic() {
  MachineProfile p;
  p.name = "synthetic";
  p.cores = 4;
  p.node_memory = int64_t{16} << 30;
  for (int r : {1, 2, 4}) {
    ComputeRates c;
    c.ranks = r;
    c.threads = 4 / r;
    c.gemm_gflops_f32 = 100.0 * 4 / r;
    c.gemm_gflops_bf16 = 200.0 * 4 / r;
    c.gemm_half_dim = 32;
    c.attn_fwd_a_ns = 0.01;
    c.attn_bwd_a_ns = 0.025;
    c.stream_gbs = 20.0 / r;
    c.op_overhead_us = 1;
    p.compute.push_back(c);
  }
  for (int g : {2, 4}) {
    for (const char* op :
         {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "send_recv"}) {
      p.node.ops[op][g] = {10.0 * g, 5.0};
    }
  }
  p.disk_read_gbs = 2;
  p.disk_write_gbs = 1;
  return p;
}

nn::ModelConfig small_model() {
  nn::ModelConfig m = nn::ModelConfig::preset("bench-small");  // 6 layers, 6 heads, d 384
  return m;
}

StepCost predict(const std::string& layout, int world = 2, int64_t seq = 256, int64_t layers = 6) {
  nn::ModelConfig m = small_model();
  m.n_layer = layers;
  return predict_step(CostInputs{m, Layout::parse(layout), world, 1, seq}, synthetic());
}

TEST(CostModel, LayoutNamesRoundTrip) {
  for (const char* name : {"ddp mb4x1", "zero3 tp2+sp pp2:1f1b mb2x4 bf16 ckpt:full offload",
                           "none pp2:interleaved_1f1b/2 mb1x8", "zero1 tp2 mb8x2 ckpt:selective",
                           "zero2 cp2:ulysses mb2x2", "none tp2 pp2:1f1b cp2:ring mb1x8 bf16"}) {
    EXPECT_EQ(Layout::parse(name).name(), name);
  }
  EXPECT_NE(error_of([] { Layout::parse("fsdp mb1x1"); }).find("the first part is the strategy"),
            std::string::npos);
  EXPECT_NE(error_of([] { Layout::parse("ddp tpx"); }).find("tpN must be a number"),
            std::string::npos);
  EXPECT_NE(error_of([] { Layout::parse("ddp warp9"); }).find("unknown part 'warp9'"),
            std::string::npos);
  // Every layout names its config values, fsdp's hybrid by its sharding strategy.
  const auto v = Layout::parse("hsdp:4 mb1x1").config_values();
  EXPECT_EQ(v.front(), (std::pair<std::string, std::string>{"parallel.strategy", "fsdp"}));
  EXPECT_EQ(v[1].second, "HYBRID_SHARD");
  EXPECT_EQ(v[2], (std::pair<std::string, std::string>{"parallel.sharding_factor", "4"}));
  EXPECT_EQ(Layout::parse("hsdp:4 tp2 mb1x1").name(), "hsdp:4 tp2 mb1x1");
  EXPECT_NE(error_of([] { Layout::parse("hsdp mb1x1"); }).find("hsdp:S"), std::string::npos);
}

TEST(CostModel, ProfileJsonRoundTripAndSpecSheet) {
  const MachineProfile p = synthetic();
  const MachineProfile q = profile_from_json(profile_to_json(p), "p.json");
  ASSERT_EQ(q.compute.size(), 3u);
  EXPECT_DOUBLE_EQ(q.compute[1].gemm_gflops_f32, 200);
  EXPECT_DOUBLE_EQ(q.node.seconds("all_reduce", 2, 5e9), p.node.seconds("all_reduce", 2, 5e9));

  const std::string spec = R"({"name": "8x H100", "device": "cuda", "ranks_per_node": 8,
    "memory_per_rank_gib": 80, "gemm_tflops_bf16": 700, "memory_gbs": 3000,
    "node_link": {"latency_us": 3, "gbs": 350}, "network_link": {"latency_us": 5, "gbs": 45}})";
  const MachineProfile h = profile_from_json(spec, "h100.json");
  EXPECT_EQ(h.rank_memory(8), int64_t{80} << 30);
  EXPECT_DOUBLE_EQ(h.compute_at(8).gemm_gflops_bf16, 700e3);  // a GPU per rank: no sharing
  // A ring all-reduce of 8 ranks moves 2 x 7/8 of the buffer over the link.
  EXPECT_NEAR(h.node.seconds("all_reduce", 8, 350e9), 14 * 3e-6 + 2 * 7.0 / 8, 1e-9);
  EXPECT_NE(error_of([] {
              profile_from_json(R"({"gemm_tflops_bf16": 1, "ranks_per_node": 1})", "x.json");
            }).find("x.json: field 'memory_per_rank_gib' is required"),
            std::string::npos);
  EXPECT_NE(error_of([] { profile_from_json("{", "bad.json"); }).find("bad.json: not JSON"),
            std::string::npos);
}

TEST(CostModel, FitsRecoverTheirModels) {
  std::vector<double> bytes = {64e3, 1e6, 8e6, 32e6}, secs;
  for (double b : bytes) secs.push_back(20e-6 + b / 8e9);
  const LinkFit f = fit_link(bytes, secs);
  EXPECT_NEAR(f.latency_us, 20, 0.01);
  EXPECT_NEAR(f.gbs, 8, 1e-6);

  std::vector<double> flops, dmin, gsecs;
  for (double d : {128.0, 256.0, 512.0, 1024.0}) {
    flops.push_back(2 * 1024 * d * d);
    dmin.push_back(d);
    gsecs.push_back(flops.back() * (d + 64) / (d * 150e9));
  }
  double rate = 0, half = 0;
  fit_gemm(flops, dmin, gsecs, rate, half);
  EXPECT_NEAR(rate, 150, 1e-6);
  EXPECT_DOUBLE_EQ(half, 64);
}

TEST(CostModel, ComputeRatesShareTheCoresPastTheCountsMeasured) {
  const MachineProfile p = synthetic();
  EXPECT_DOUBLE_EQ(p.compute_at(2).gemm_gflops_f32, 200);
  const ComputeRates eight = p.compute_at(8);  // beyond 4 measured: half of 4's rate
  EXPECT_DOUBLE_EQ(eight.gemm_gflops_f32, 50);
  EXPECT_DOUBLE_EQ(eight.attn_fwd_a_ns, 0.02);
}

TEST(CostModel, PartsFollowTheLayout) {
  const StepCost ddp = predict("ddp mb4x1");
  EXPECT_GT(ddp.gemm, 0);
  EXPECT_GT(ddp.attention, 0);
  EXPECT_GT(ddp.loss, 0);
  EXPECT_EQ(ddp.bubble, 0);
  EXPECT_NEAR(ddp.step,
              ddp.gemm + ddp.attention + ddp.memory + ddp.loss + ddp.overhead + ddp.optimizer +
                  ddp.comm_exposed + ddp.bubble + ddp.offload,
              1e-12);
  // ZeRO steps a 1/dp share of the optimizer state.
  const StepCost z1 = predict("zero1 mb4x1");
  EXPECT_LT(z1.optimizer, ddp.optimizer);
  EXPECT_EQ(z1.gemm, ddp.gemm);
  // Full checkpointing reruns the blocks' forward: a third more block GEMM time (forward 1,
  // backward 2).
  const StepCost ck = predict("ddp mb4x1 ckpt:full");
  EXPECT_NEAR(ck.gemm / ddp.gemm, 4.0 / 3.0, 1e-9);
  EXPECT_NEAR(ck.recompute,
              ck.gemm - ddp.gemm + (ck.attention - ddp.attention) + (ck.memory - ddp.memory),
              1e-12);
  // Tensor parallelism halves each rank's products (of twice the sequences here) and adds
  // exposed all-reduces.
  const StepCost tp = predict("none tp2 mb8x1");
  EXPECT_GT(tp.comm_exposed, 0);
  EXPECT_NEAR(tp.gemm, ddp.gemm, ddp.gemm * 0.1);
  // bf16 runs the products at the bf16 rate.
  EXPECT_NEAR(predict("ddp mb4x1 bf16").gemm, ddp.gemm / 2, ddp.gemm * 1e-9);
  // Offload costs the disk's time for its state; ZeRO-3's f32 parameters are read again for each
  // micro-batch's gathers, a narrower compute dtype gathers from its copy in memory (Note
  // [Offloaded compute copy]): the state alone, as zero2's.
  EXPECT_GT(predict("zero1 mb4x1 offload").offload, 0);
  EXPECT_GT(predict("zero3 mb1x8 offload").offload,
            predict("zero3 mb1x8 bf16 offload").offload * 1.5);
  EXPECT_NEAR(predict("zero3 mb2x2 bf16 offload").offload,
              predict("zero2 mb2x2 bf16 offload").offload, 1e-12);
}

// Note [CPU network overlap]: across hosts a CPU node's data-parallel collectives are exposed
// whole; inside a node, and on a GPU node across hosts, DDP's buckets hide behind backward.
TEST(CostModel, CpuCollectivesAcrossHostsAreNotHidden) {
  MachineProfile p = synthetic();
  p.network = p.node;
  const nn::ModelConfig m = small_model();
  auto step = [&](const MachineProfile& prof, const char* layout, int hosts) {
    return predict_step(CostInputs{m, Layout::parse(layout), 2, hosts, 256}, prof);
  };
  for (const char* layout : {"ddp mb4x1", "zero2 mb4x1", "zero3 mb4x1"}) {
    const StepCost one = step(p, layout, 1), two = step(p, layout, 2);
    EXPECT_LT(one.comm_exposed, one.comm_total) << layout;
    EXPECT_DOUBLE_EQ(two.comm_exposed, two.comm_total) << layout;
  }
  MachineProfile gpu = p;
  gpu.device = "cuda";
  const StepCost g = step(gpu, "ddp mb4x1", 2);
  EXPECT_LT(g.comm_exposed, g.comm_total);
}

TEST(CostModel, PipelineBubbleFollowsTheSchedule) {
  // The model's stages are unequal (the head on the last), so the bubble is
  // (sum c - max c) / v: interleaving with 2 chunks halves 1F1B's, GPipe equals it.
  const StepCost one = predict("none pp2:1f1b mb1x8", 2, 256, 8);
  const StepCost gpipe = predict("none pp2:gpipe mb1x8", 2, 256, 8);
  const StepCost inter = predict("none pp2:interleaved_1f1b/2 mb1x8", 2, 256, 8);
  EXPECT_GT(one.bubble, 0);
  EXPECT_DOUBLE_EQ(gpipe.bubble, one.bubble);
  EXPECT_NEAR(inter.bubble, one.bubble / 2, one.bubble * 1e-9);
  // zb_h1 idles F + B - W per stage instead of F + B + W.
  const StepCost zb = predict("none pp2:zb_h1 mb1x8", 2, 256, 8);
  EXPECT_GT(zb.bubble, 0);
  EXPECT_LT(zb.bubble, one.bubble * 0.75);
  EXPECT_EQ(zb.gemm, one.gemm);
  EXPECT_NE(error_of([] { predict("zero3 pp2:zb_h1 mb1x8", 4, 256, 8); }).find("ZeRO-3"),
            std::string::npos);
  // zb_v (Note [ZB-V]): the last stage waits for one chunk's forward of the first, then
  // nothing waits: below zb_h1's; with few micro-batches the chain through the V is the path.
  const StepCost zbv = predict("none pp2:zb_v/2 mb1x8", 2, 256, 8);
  EXPECT_GT(zbv.bubble, 0);
  EXPECT_LT(zbv.bubble, zb.bubble);
  EXPECT_GT(predict("none pp2:zb_v/2 mb1x1", 2, 256, 8).bubble, zbv.bubble);
  EXPECT_NE(error_of([] { predict("zero3 pp2:zb_v/2 mb1x8", 4, 256, 8); }).find("ZeRO-3"),
            std::string::npos);
  EXPECT_NE(error_of([] { predict("none pp2:zb_v mb1x8", 2, 256, 8); }).find("zb_v takes 2"),
            std::string::npos);
  // More micro-batches: the same bubble over a longer step.
  const StepCost m16 = predict("none pp2:1f1b mb1x16", 2, 256, 8);
  EXPECT_NEAR(m16.bubble, one.bubble, one.bubble * 1e-9);
  EXPECT_GT(m16.step, one.step);
}

// Note [Oversubscribed bubble]: 8 ranks on the 4 cores run at half a rank's rate, so a stage's
// work costs twice what it does with 4; but the first stage (no LM head) has less of it and
// lends its cores to the last, whose parts then take less than twice, and no bubble is left.
TEST(CostModel, OversubscribedPipelineStagesLendTheirCores) {
  const StepCost alone = predict("zero1 pp2:1f1b mb1x8", 4, 256, 8);
  const StepCost shared = predict("zero1 pp2:1f1b mb1x8", 8, 256, 8);
  EXPECT_GT(shared.gemm, alone.gemm);
  EXPECT_LT(shared.gemm, 2 * alone.gemm * 0.99);
  EXPECT_NEAR(shared.gemm / shared.loss, alone.gemm / alone.loss, 1e-9);  // every part alike
  EXPECT_EQ(shared.bubble, 0);
  EXPECT_GT(alone.bubble, 0);
}

// Note [CPU network overlap]: with more ranks than cores there is no idle core to hide a
// data-parallel collective behind; with a core each, DDP's buckets hide behind backward.
TEST(CostModel, OversubscribedCollectivesAreNotHidden) {
  const StepCost alone = predict("zero3 mb2x1", 4, 256, 8);
  const StepCost shared = predict("zero3 mb1x1", 8, 256, 8);
  EXPECT_LT(alone.comm_exposed, alone.comm_total * 0.5);
  EXPECT_NEAR(shared.comm_exposed, shared.comm_total, shared.comm_total * 1e-9);
}

// Note [Context-parallel cost]: cp 2 over a batch of whole sequences does the work of DDP over
// as many tokens a rank (the products and the attention's share alike), plus ring's merges and
// exposed hops or Ulysses' all-to-alls; its config keys name the mode.
TEST(CostModel, ContextParallelSharesTheSequence) {
  const StepCost ddp = predict("ddp mb4x1");
  const StepCost ring = predict("none cp2:ring mb8x1");
  EXPECT_NEAR(ring.gemm, ddp.gemm, ddp.gemm * 1e-9);
  EXPECT_NEAR(ring.attention, ddp.attention, ddp.attention * 1e-9);
  EXPECT_GT(ring.memory, ddp.memory);  // the merges
  EXPECT_GT(ring.comm_exposed, ddp.comm_exposed);
  const StepCost ulysses = predict("none cp2:ulysses mb8x1");
  EXPECT_NEAR(ulysses.memory, ddp.memory, ddp.memory * 1e-9);
  EXPECT_GT(ulysses.comm_exposed, ddp.comm_exposed);
  // dp 2 x cp 2 on 4 ranks: ZeRO shards over all four.
  EXPECT_LT(predict("zero1 cp2:ring mb2x1", 4).optimizer,
            predict("zero1 mb2x1", 4).optimizer * 1.01);
  const auto v = Layout::parse("none cp2:ulysses mb8x1").config_values();
  EXPECT_NE(
      std::find(v.begin(), v.end(),
                std::pair<std::string, std::string>{"parallel.context_parallel_mode", "ulysses"}),
      v.end());
  EXPECT_NE(error_of([] { predict("none cp2:ring mb8x1", 2, 250); }).find("divide by 2 x cp = 4"),
            std::string::npos);
  EXPECT_NE(error_of([] { predict("none cp4:ulysses mb8x1", 4); }).find("ulysses needs"),
            std::string::npos);
  EXPECT_NE(error_of([] { Layout::parse("none cp2:spiral mb1x1"); }).find("ring or ulysses"),
            std::string::npos);
}

TEST(CostModel, LayoutsThatDoNotFitTheModelAreNamed) {
  EXPECT_NE(error_of([] { predict("none tp4 mb1x1", 4); }).find("tp 4 does not divide the 6 heads"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              predict("none pp4:1f1b mb1x4", 4);
            }).find("pp 4 x 1 chunks does not divide the 6 layers"),
            std::string::npos);
  EXPECT_NE(
      error_of([] { predict("none mb1x1", 2); }).find("strategy none with 2 data-parallel ranks"),
      std::string::npos);
  EXPECT_NE(error_of([] { predict("ddp offload mb1x1"); }).find("offload needs ZeRO"),
            std::string::npos);
}

TEST(Planner, RanksFittingLayoutsFastestFirst) {
  PlanRequest q;
  q.model = small_model();
  q.world = 2;
  q.seq_len = 256;
  q.global_batch = 8;
  const PlanResult r = plan_layouts(q, synthetic());
  ASSERT_FALSE(r.ranked.empty());
  EXPECT_EQ(r.too_big.size(), 0u);
  for (const auto& c : r.ranked) {
    EXPECT_TRUE(layout_problem(CostInputs{q.model, c.layout, 2, 1, 256}).empty());
    // Every layout trains the global batch.
    EXPECT_EQ(c.layout.micro_batch * c.layout.accumulation *
                  (2 / (c.layout.tp * c.layout.pp * c.layout.cp)),
              8);
  }
  // Context parallelism is among them, both ways.
  for (const char* mode : {"ring", "ulysses"})
    EXPECT_TRUE(std::any_of(r.ranked.begin(), r.ranked.end(), [&](const Candidate& c) {
      return c.layout.cp == 2 && c.layout.cp_mode == mode;
    })) << mode;
  // The first is within 1% of the fastest (Note [Plan ranking]).
  double fastest = INFINITY;
  for (const auto& c : r.ranked) fastest = std::min(fastest, c.cost.step);
  EXPECT_LE(r.ranked.front().cost.step, fastest * 1.01);
  EXPECT_NE(explain_choice(r).find("Chosen: " + r.ranked.front().layout.name()), std::string::npos);
}

TEST(Planner, ABudgetDdpExceedsPicksALayoutThatFits) {
  PlanRequest q;
  q.model = nn::ModelConfig::preset("gpt2-small");
  q.world = 4;
  q.seq_len = 256;
  q.global_batch = 8;
  q.precisions = {DType::f32};
  q.offload = false;
  // Between ZeRO-3's training state and DDP's: DDP cannot fit.
  Layout ddp = Layout::parse("ddp mb1x2");
  const int64_t ddp_bytes = layout_memory(q, ddp).total();
  q.budget = ddp_bytes * 7 / 10;
  const PlanResult r = plan_layouts(q, synthetic());
  ASSERT_FALSE(r.ranked.empty());
  EXPECT_LE(r.ranked.front().memory.total(), q.budget);
  EXPECT_NE(r.ranked.front().layout.strategy, "ddp");
  for (const auto& c : r.ranked) EXPECT_LE(c.memory.total(), q.budget);
  EXPECT_NE(explain_choice(r).find("ddp does not fit"), std::string::npos);
  // A budget nothing fits: no choice, and the smallest named.
  q.budget = 1 << 20;
  const PlanResult none = plan_layouts(q, synthetic());
  EXPECT_TRUE(none.ranked.empty());
  EXPECT_NE(explain_choice(none).find("No layout fits"), std::string::npos);
}

// Note [Sequence-parallel activations]: the same layout with sequence parallelism keeps the same
// training state, buffers and scratch, and less activation memory by what the Note counts: per
// block GPT-2 keeps 4NC + 8nC instead of 10NC (n = N / tp) and its norms' statistics on n tokens,
// outside the blocks the embedding's NC + 3nC (and the positions) instead of 4NC, the final
// norm's nC and the head's gathered NC instead of NC, and the head's backward moment NC over
// them instead of 2NC.
TEST(Planner, SequenceParallelismSavesTheModelledActivations) {
  PlanRequest q;
  q.model = nn::ModelConfig::preset("gpt2-small");
  q.world = 2;
  q.seq_len = 256;
  q.global_batch = 1;
  const MemoryEstimate tp = layout_memory(q, Layout::parse("none tp2 mb1x1"));
  const MemoryEstimate sp = layout_memory(q, Layout::parse("none tp2+sp mb1x1"));
  EXPECT_EQ(sp.training_state(), tp.training_state());
  EXPECT_EQ(sp.communication, tp.communication);
  EXPECT_EQ(sp.scratch, tp.scratch);
  const int64_t a = 4, N = 256, n = N / 2, C = 768, L = 12;
  const int64_t per_block = a * (10 * N * C - (4 * N * C + 8 * n * C)) + 4 * 4 * (N - n);
  const int64_t outside = a * (4 * N * C - (N + 3 * n) * C) + 4 * (N - n)  // the embedding's
                          + a * (N * C - (n + N) * C)                      // the final norm's
                          + a * (2 * N * C - N * C);  // the head's backward moment
  EXPECT_EQ(tp.activations - sp.activations, L * per_block + outside);
}

TEST(Planner, GlobalBatchNoLayoutDividesIsAnError) {
  PlanRequest q;
  q.model = small_model();
  q.model.n_layer = 3;
  q.model.n_head = q.model.n_kv_head = 3;
  q.world = 4;
  q.seq_len = 250;
  // dp 4 and 2 do not divide it; dp 1 needs tp x pp x cp = 4: tp 2 and 4 do not divide 3 heads,
  // 4 stages are more than 3 layers, 250 tokens do not split zig-zag over cp 2 or 4, nor 3 heads
  // over Ulysses' groups.
  q.global_batch = 3;
  EXPECT_NE(error_of([&] { plan_layouts(q, synthetic()); }).find("no layout of 4 ranks"),
            std::string::npos);
}

}  // namespace
}  // namespace braid::parallel::cost
