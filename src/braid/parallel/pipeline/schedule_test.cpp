// The pipeline schedules as action lists: complete, each chunk's micro-batches in order (Note
// [Pipeline messages]), deadlock free, the in-flight bound of each, and a simulated bubble that
// is exactly the textbook formula.
#include "braid/parallel/pipeline/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>
#include <tuple>
#include <utility>

#include "braid/core/error.h"
#include "testing/run_ranks.h"

namespace braid::parallel::pipeline {
namespace {

// Every valid shape with p in {1, 2, 3, 4, 8}, m in 1..17 and v in {2, 3}.
std::vector<ScheduleShape> shapes() {
  std::vector<ScheduleShape> out;
  for (int p : {1, 2, 3, 4, 8})
    for (int m = 1; m <= 17; ++m) {
      out.push_back({ScheduleKind::gpipe, p, m, 1});
      out.push_back({ScheduleKind::one_f_one_b, p, m, 1});
      for (int v : {2, 3})
        if (m % p == 0) out.push_back({ScheduleKind::interleaved_1f1b, p, m, v});
    }
  return out;
}

std::string str(const ScheduleShape& s) {
  return std::string(schedule_name(s.kind)) + " p=" + std::to_string(s.stages) +
         " m=" + std::to_string(s.micro_batches) + " v=" + std::to_string(s.chunks);
}

std::string names(const std::vector<Action>& actions) {
  std::string out;
  for (const Action& a : actions) out += (out.empty() ? "" : ", ") + action_name(a);
  return out;
}

using braid::testing::error_of;

TEST(PipelineSchedule, EveryActionOnceAndEachChunkInMicroOrder) {
  for (const ScheduleShape& s : shapes()) {
    for (int r = 0; r < s.stages; ++r) {
      const std::vector<Action> actions = stage_actions(s, r);
      ASSERT_EQ(actions.size(), static_cast<size_t>(2 * s.micro_batches * s.chunks)) << str(s);
      std::set<std::tuple<bool, int, int>> seen;
      std::vector<int> last_forward(static_cast<size_t>(s.chunks), -1);
      std::vector<int> last_backward(static_cast<size_t>(s.chunks), -1);
      for (const Action& a : actions) {
        const bool forward = a.kind == Action::Kind::forward;
        ASSERT_TRUE(a.chunk >= 0 && a.chunk < s.chunks) << str(s);
        EXPECT_TRUE(seen.insert({forward, a.micro, a.chunk}).second)
            << str(s) << " rank " << r << ": " << action_name(a) << " twice";
        int& last = (forward ? last_forward : last_backward)[static_cast<size_t>(a.chunk)];
        EXPECT_EQ(a.micro, last + 1) << str(s) << " rank " << r << ": " << action_name(a);
        last = a.micro;
      }
      // Each (micro, chunk) forward and backward once, all in range: the set is full.
      EXPECT_EQ(seen.size(), actions.size()) << str(s);
    }
  }
}

TEST(PipelineSchedule, KnownOrders) {
  EXPECT_EQ(names(stage_actions({ScheduleKind::gpipe, 2, 3, 1}, 1)),
            "F m0 c0, F m1 c0, F m2 c0, B m0 c0, B m1 c0, B m2 c0");
  EXPECT_EQ(names(stage_actions({ScheduleKind::one_f_one_b, 4, 6, 1}, 1)),
            "F m0 c0, F m1 c0, F m2 c0, B m0 c0, F m3 c0, B m1 c0, F m4 c0, B m2 c0, F m5 c0, "
            "B m3 c0, B m4 c0, B m5 c0");
  // Fewer micro-batches than stages: the warm-up is all of them.
  EXPECT_EQ(names(stage_actions({ScheduleKind::one_f_one_b, 4, 2, 1}, 0)),
            "F m0 c0, F m1 c0, B m0 c0, B m1 c0");
  // Megatron's order for p 2, v 2, m 4 on rank 0: warm-up 2 (p - 1) + (v - 1) p = 4.
  EXPECT_EQ(names(stage_actions({ScheduleKind::interleaved_1f1b, 2, 4, 2}, 0)),
            "F m0 c0, F m1 c0, F m0 c1, F m1 c1, F m2 c0, B m0 c1, F m3 c0, B m1 c1, F m2 c1, "
            "B m0 c0, F m3 c1, B m1 c0, B m2 c1, B m3 c1, B m2 c0, B m3 c0");
}

// With equal stages the simulated idle time of every rank is the textbook bubble, exactly (up to
// rounding), for all three schedules and whatever the forward and backward costs.
TEST(PipelineSchedule, NoDeadlockAndTheBubbleOfTheFormula) {
  for (const ScheduleShape& s : shapes())
    for (auto [forward, backward] : {std::pair{1.0, 2.0}, {1.0, 1.0}, {1.3, 2.9}, {2.0, 0.5}}) {
      const SimResult sim = simulate(s, forward, backward);
      const double busy = (forward + backward) * s.micro_batches * s.chunks;
      ASSERT_EQ(sim.idle_fraction.size(), static_cast<size_t>(s.stages));
      EXPECT_NEAR(sim.makespan, busy / (1 - ideal_bubble(s)), 1e-9 * sim.makespan) << str(s);
      for (int r = 0; r < s.stages; ++r)
        EXPECT_NEAR(sim.idle_fraction[static_cast<size_t>(r)], ideal_bubble(s), 1e-9)
            << str(s) << " rank " << r << " f=" << forward << " b=" << backward;
    }
}

TEST(PipelineSchedule, InFlightMicroBatches) {
  for (const ScheduleShape& s : shapes()) {
    const SimResult sim = simulate(s, 1, 2);
    const int p = s.stages, m = s.micro_batches, v = s.chunks;
    for (int r = 0; r < p; ++r) {
      int expected = m;  // gpipe
      if (s.kind == ScheduleKind::one_f_one_b) expected = std::min(p - r, m);
      if (s.kind == ScheduleKind::interleaved_1f1b)
        expected = std::min(2 * (p - r - 1) + (v - 1) * p + 1, m * v);
      EXPECT_EQ(sim.max_in_flight[static_cast<size_t>(r)], expected) << str(s) << " rank " << r;
    }
  }
}

TEST(PipelineSchedule, SimulatorNamesTheStuckActions) {
  const ScheduleShape s{ScheduleKind::one_f_one_b, 2, 1, 1};
  const std::vector<std::vector<Action>> backward_first = {
      {{Action::Kind::backward, 0, 0}, {Action::Kind::forward, 0, 0}},
      {{Action::Kind::forward, 0, 0}, {Action::Kind::backward, 0, 0}}};
  EXPECT_EQ(error_of([&] { simulate(s, backward_first, 1, 2); }),
            "pipeline schedule 1f1b (p 2, m 1, v 1) deadlocks: rank 0 waits at B m0 c0, rank 1 "
            "waits at F m0 c0");
}

TEST(PipelineSchedule, ErrorsNameTheKey) {
  EXPECT_EQ(error_of([] {
              check_schedule({ScheduleKind::interleaved_1f1b, 4, 6, 2});
            }),
            "parallel.pipeline_schedule: interleaved_1f1b needs "
            "training.gradient_accumulation_steps (6) to be a multiple of "
            "parallel.pipeline_parallel_size (4)");
  EXPECT_EQ(error_of([] {
              check_schedule({ScheduleKind::one_f_one_b, 2, 4, 2});
            }),
            "parallel.pipeline_virtual_stages 2 needs parallel.pipeline_schedule: "
            "interleaved_1f1b (1f1b runs one chunk per rank)");
  EXPECT_EQ(error_of([] {
              check_schedule({ScheduleKind::interleaved_1f1b, 2, 4, 1});
            }),
            "parallel.pipeline_schedule: interleaved_1f1b needs parallel.pipeline_virtual_stages "
            ">= 2, got 1");
  EXPECT_EQ(error_of([] {
              check_schedule({ScheduleKind::gpipe, 2, 0, 1});
            }),
            "training.gradient_accumulation_steps (the pipeline's micro-batches) must be >= 1, "
            "got 0");
  EXPECT_EQ(error_of([] {
              check_schedule({ScheduleKind::gpipe, 0, 1, 1});
            }),
            "parallel.pipeline_parallel_size must be >= 1, got 0");
  EXPECT_NE(error_of([] {
              stage_actions({ScheduleKind::gpipe, 2, 1, 1}, 2);
            }).find("parallel.pipeline_parallel_size 2"),
            std::string::npos);
  EXPECT_EQ(error_of([] { schedule_from_name("zb"); }),
            "config key 'parallel.pipeline_schedule' is 'zb', expected one of: gpipe, 1f1b, "
            "interleaved_1f1b, zb_h1, zb_v");
  EXPECT_EQ(error_of([] {
              check_schedule({ScheduleKind::zb_v, 2, 4, 3});
            }),
            "parallel.pipeline_schedule: zb_v runs two chunks per rank (its V), but "
            "parallel.pipeline_virtual_stages is 3");
  EXPECT_EQ(error_of([] {
              check_schedule({ScheduleKind::zb_h1, 2, 4, 2});
            }),
            "parallel.pipeline_virtual_stages 2 needs parallel.pipeline_schedule: "
            "interleaved_1f1b (zb_h1 runs one chunk per rank)");
  for (auto kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved_1f1b,
                    ScheduleKind::zb_h1, ScheduleKind::zb_v})
    EXPECT_EQ(schedule_from_name(schedule_name(kind)), kind);
}

// ---- zb_h1 (Note [ZB-H1 bubble]) ----

// Simulated at equal pass costs `unit`: every stage idles exactly ideal_bubble(s).
SimResult expect_ideal_bubble(const ScheduleShape& s, double unit) {
  const SimResult sim = simulate(s, unit, unit, unit);
  for (int r = 0; r < s.stages; ++r) {
    EXPECT_NEAR(sim.idle_fraction[static_cast<size_t>(r)], ideal_bubble(s), 1e-9)
        << str(s) << " rank " << r;
  }
  return sim;
}

std::vector<ScheduleShape> zb_shapes() {
  std::vector<ScheduleShape> out;
  for (int p : {1, 2, 3, 4, 8})
    for (int m = 1; m <= 17; ++m) out.push_back({ScheduleKind::zb_h1, p, m, 1});
  return out;
}

TEST(PipelineSchedule, ZbH1EveryPassOnceInMicroOrderAndEachWAfterItsB) {
  for (const ScheduleShape& s : zb_shapes())
    for (int r = 0; r < s.stages; ++r) {
      const std::vector<Action> actions = stage_actions(s, r);
      ASSERT_EQ(actions.size(), static_cast<size_t>(3 * s.micro_batches)) << str(s);
      int last[3] = {-1, -1, -1};  // per kind: forward, backward, weight
      for (const Action& a : actions) {
        ASSERT_EQ(a.chunk, 0) << str(s);
        int& l = last[static_cast<int>(a.kind)];
        EXPECT_EQ(a.micro, l + 1) << str(s) << " rank " << r << ": " << action_name(a);
        l = a.micro;
        // A W after its B, a B after its F.
        const int before = a.kind == Action::Kind::weight     ? last[1]
                           : a.kind == Action::Kind::backward ? last[0]
                                                              : a.micro;
        EXPECT_LE(a.micro, before) << str(s) << " rank " << r << ": " << action_name(a);
      }
      EXPECT_EQ(last[0], s.micro_batches - 1);
      EXPECT_EQ(last[1], s.micro_batches - 1);
      EXPECT_EQ(last[2], s.micro_batches - 1);
    }
}

TEST(PipelineSchedule, ZbH1KnownOrders) {
  // Stage 1 of 4: 1F1B's F and B, each W one B behind.
  EXPECT_EQ(names(stage_actions({ScheduleKind::zb_h1, 4, 6, 1}, 1)),
            "F m0 c0, F m1 c0, F m2 c0, B m0 c0, F m3 c0, B m1 c0, W m0 c0, F m4 c0, B m2 c0, "
            "W m1 c0, F m5 c0, B m3 c0, W m2 c0, B m4 c0, W m3 c0, B m5 c0, W m4 c0, W m5 c0");
  // The first stage runs each W right after its B; the last one p - 1 B's behind.
  EXPECT_EQ(names(stage_actions({ScheduleKind::zb_h1, 2, 3, 1}, 0)),
            "F m0 c0, F m1 c0, B m0 c0, W m0 c0, F m2 c0, B m1 c0, W m1 c0, B m2 c0, W m2 c0");
  EXPECT_EQ(names(stage_actions({ScheduleKind::zb_h1, 2, 3, 1}, 1)),
            "F m0 c0, B m0 c0, F m1 c0, B m1 c0, W m0 c0, F m2 c0, B m2 c0, W m1 c0, W m2 c0");
}

// With F = B = W every stage idles exactly ideal_bubble(): (p - 1) / (3m + p - 1) for m >= p, a
// third of 1F1B's idle time; with other costs (W <= F, W <= B) the makespan is Note [ZB-H1
// bubble]'s. Always below 1F1B's bubble at the same costs, for p > 1.
TEST(PipelineSchedule, ZbH1BubbleOfTheFormula) {
  for (const ScheduleShape& s : zb_shapes()) {
    const double p = s.stages, m = s.micro_batches;
    for (double unit : {1.0, 2.5}) {
      expect_ideal_bubble(s, unit);
      if (s.micro_batches >= s.stages) {
        EXPECT_NEAR(ideal_bubble(s), (p - 1) / (3 * m + p - 1), 1e-12) << str(s);
      }
    }
    for (auto [f, b, w] : {std::tuple{1.0, 1.2, 0.8}, {2.0, 1.0, 1.0}, {1.0, 3.0, 1.0}}) {
      const SimResult sim = simulate(s, f, b, w);
      const double makespan =
          std::max(m * (f + b + w) + (p - 1) * (f + b - w), (m + p - 1) * (f + b) + w);
      EXPECT_NEAR(sim.makespan, makespan, 1e-9 * makespan) << str(s) << " " << f << b << w;
      const SimResult one_f_one_b =
          simulate({ScheduleKind::one_f_one_b, s.stages, s.micro_batches, 1}, f, b, w);
      if (s.stages > 1) {
        EXPECT_LT(sim.idle_fraction[0], one_f_one_b.idle_fraction[0] - 1e-9) << str(s);
      }
    }
  }
}

// A micro-batch is held from its F to its W: min(p, m) on every stage, no more than 1F1B's most
// (stage 0's).
TEST(PipelineSchedule, ZbH1InFlightNoMoreThan1F1B) {
  for (const ScheduleShape& s : zb_shapes()) {
    const SimResult zb = simulate(s, 1, 1, 1);
    const SimResult base =
        simulate({ScheduleKind::one_f_one_b, s.stages, s.micro_batches, 1}, 1, 2);
    const int most = *std::max_element(base.max_in_flight.begin(), base.max_in_flight.end());
    for (int r = 0; r < s.stages; ++r) {
      EXPECT_EQ(zb.max_in_flight[static_cast<size_t>(r)], std::min(s.stages, s.micro_batches))
          << str(s) << " rank " << r;
      EXPECT_LE(zb.max_in_flight[static_cast<size_t>(r)], most) << str(s) << " rank " << r;
    }
  }
}

TEST(PipelineSchedule, ZbH1SimulatorChecksTheWeightPasses) {
  // A W before its B deadlocks; a W in a schedule without weight passes is an error.
  const ScheduleShape zb{ScheduleKind::zb_h1, 1, 1, 1};
  EXPECT_EQ(error_of([&] {
              simulate(zb,
                       {{{Action::Kind::forward, 0, 0},
                         {Action::Kind::weight, 0, 0},
                         {Action::Kind::backward, 0, 0}}},
                       1, 1, 1);
            }),
            "pipeline schedule zb_h1 (p 1, m 1, v 1) deadlocks: rank 0 waits at W m0 c0");
  EXPECT_NE(error_of([] {
              simulate({ScheduleKind::one_f_one_b, 1, 1, 1},
                       {{{Action::Kind::forward, 0, 0},
                         {Action::Kind::backward, 0, 0},
                         {Action::Kind::weight, 0, 0}}},
                       1, 1, 1);
            }).find("1f1b has no weight passes"),
            std::string::npos);
}

// ---- zb_v (Note [ZB-V]) ----

std::vector<ScheduleShape> zb_v_shapes() {
  std::vector<ScheduleShape> out;
  for (int p : {1, 2, 3, 4, 5, 8})
    for (int m = 1; m <= 17; ++m) out.push_back({ScheduleKind::zb_v, p, m, 2});
  return out;
}

TEST(PipelineSchedule, ZbVPlacesTheChunksInAV) {
  const ScheduleShape s{ScheduleKind::zb_v, 4, 8, 2};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(virtual_stage(s, r, 0), r);
    EXPECT_EQ(virtual_stage(s, r, 1), 7 - r);
    EXPECT_EQ(stage_of(s, r), r);
    EXPECT_EQ(stage_of(s, 7 - r), r);
  }
  // Interleaving keeps Megatron's placement.
  EXPECT_EQ(virtual_stage({ScheduleKind::interleaved_1f1b, 4, 8, 2}, 1, 1), 5);
  EXPECT_EQ(stage_of({ScheduleKind::interleaved_1f1b, 4, 8, 2}, 5), 1);
  EXPECT_EQ(chunks_per_rank("zb_v", 1), 2);
  EXPECT_EQ(chunks_per_rank("zb_v", 3), 3);  // check_schedule refuses it
  EXPECT_EQ(chunks_per_rank("interleaved_1f1b", 1), 1);
}

TEST(PipelineSchedule, ZbVEveryPassOnceInMicroOrder) {
  for (const ScheduleShape& s : zb_v_shapes())
    for (int r = 0; r < s.stages; ++r) {
      const std::vector<Action> actions = stage_actions(s, r);
      ASSERT_EQ(actions.size(), static_cast<size_t>(6 * s.micro_batches)) << str(s);
      int last[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};  // per kind (F, B, W) and chunk
      for (const Action& a : actions) {
        ASSERT_TRUE(a.chunk == 0 || a.chunk == 1) << str(s);
        int& l = last[static_cast<int>(a.kind)][a.chunk];
        EXPECT_EQ(a.micro, l + 1) << str(s) << " rank " << r << ": " << action_name(a);
        l = a.micro;
        // A W after its B, a B after its F.
        const int kind = static_cast<int>(a.kind);
        if (kind > 0) {
          EXPECT_LE(a.micro, last[kind - 1][a.chunk]) << str(s) << " rank " << r;
        }
      }
      for (auto& kind : last) {
        EXPECT_EQ(kind[0], s.micro_batches - 1) << str(s);
        EXPECT_EQ(kind[1], s.micro_batches - 1) << str(s);
      }
    }
}

TEST(PipelineSchedule, ZbVKnownOrders) {
  // Two stages, three micro-batches: the first stage holds virtual stages 0 and 3, the second 1
  // and 2 (back to back: its chunk 0 hands its output to its chunk 1).
  EXPECT_EQ(names(stage_actions({ScheduleKind::zb_v, 2, 3, 2}, 0)),
            "F m0 c0, F m1 c0, F m2 c0, F m0 c1, B m0 c1, W m0 c1, F m1 c1, B m1 c1, W m1 c1, "
            "B m0 c0, W m0 c0, F m2 c1, B m2 c1, W m2 c1, B m1 c0, W m1 c0, B m2 c0, W m2 c0");
  EXPECT_EQ(names(stage_actions({ScheduleKind::zb_v, 2, 3, 2}, 1)),
            "F m0 c0, F m0 c1, F m1 c0, F m1 c1, B m0 c1, W m0 c1, F m2 c0, B m0 c0, W m0 c0, "
            "F m2 c1, B m1 c1, W m1 c1, B m1 c0, B m2 c1, B m2 c0, W m1 c0, W m2 c1, W m2 c0");
  // One micro-batch: down the V and back.
  EXPECT_EQ(names(stage_actions({ScheduleKind::zb_v, 2, 1, 2}, 0)),
            "F m0 c0, F m0 c1, B m0 c1, W m0 c1, B m0 c0, W m0 c0");
}

// With F = B = W per chunk pass every stage idles exactly ideal_bubble(): (p - 1) / (6m + p - 1)
// for enough micro-batches, half of zb_h1's with its stage passes at two chunk passes; with other
// costs, below 1F1B's at the same costs.
TEST(PipelineSchedule, ZbVBubbleOfTheFormula) {
  for (const ScheduleShape& s : zb_v_shapes()) {
    const double p = s.stages, m = s.micro_batches;
    for (double unit : {1.0, 2.5}) {
      const SimResult sim = expect_ideal_bubble(s, unit);
      EXPECT_NEAR(sim.makespan, unit * std::max(6 * m + p - 1, 4 * m + 4 * p - 2), 1e-9) << str(s);
      if (6 * m + p - 1 >= 4 * m + 4 * p - 2) {
        EXPECT_NEAR(ideal_bubble(s), (p - 1) / (6 * m + p - 1), 1e-12) << str(s);
        const SimResult h1 = simulate({ScheduleKind::zb_h1, s.stages, s.micro_batches, 1}, 2 * unit,
                                      2 * unit, 2 * unit);
        if (s.stages > 1) {
          EXPECT_LT(sim.makespan, h1.makespan) << str(s);
        }
      }
    }
    for (auto [f, b, w] : {std::tuple{1.0, 1.2, 0.8}, {2.0, 1.0, 1.0}, {1.0, 3.0, 1.0}}) {
      const SimResult sim = simulate(s, f, b, w);
      const SimResult one_f_one_b =
          simulate({ScheduleKind::one_f_one_b, s.stages, s.micro_batches, 1}, 2 * f, 2 * b, 2 * w);
      if (s.stages > 1) {
        EXPECT_LT(sim.idle_fraction[0], one_f_one_b.idle_fraction[0] - 1e-9) << str(s);
      }
    }
  }
}

// A rank holds a chunk micro-batch from its F to its W: at most 2 min(p, m) of them, each half a
// stage's layers, and 2p on every rank once m >= 2p - 1: 1F1B's first stage's p whole ones.
TEST(PipelineSchedule, ZbVInFlightAsMuchAs1F1B) {
  for (const ScheduleShape& s : zb_v_shapes()) {
    const SimResult zb = simulate(s, 1, 1, 1);
    for (int r = 0; r < s.stages; ++r) {
      const int most = zb.max_in_flight[static_cast<size_t>(r)];
      EXPECT_LE(most, 2 * std::min(s.stages, s.micro_batches)) << str(s) << " rank " << r;
      if (s.micro_batches >= 2 * s.stages - 1) {
        EXPECT_EQ(most, 2 * s.stages) << str(s) << " rank " << r;
      }
    }
  }
}

// Note [Shared cores]: at max_speedup 1 the per-stage simulation is the uniform one; with ranks
// sharing cores a pass runs up to S times faster while fewer stages work, so a serial pipeline
// (one micro-batch) takes 1/S of its dedicated time, and no schedule beats the work over the
// cores or the busiest rank at its fastest.
TEST(PipelineSchedule, SharedCoresLendTheBubble) {
  for (const ScheduleShape& s : shapes()) {
    const bool split = has_weight_passes(s.kind);
    const SimResult uniform = simulate(s, 1.0, 2.0, split ? 0.5 : 0.0);
    const std::vector<PassCosts> same(static_cast<size_t>(s.stages),
                                      PassCosts{1.0, 2.0, split ? 0.5 : 0.0});
    EXPECT_NEAR(simulate(s, same, 1).makespan, uniform.makespan, 1e-9 * uniform.makespan) << str(s);
    // Uneven stages (the last holds the LM head), on half a core each.
    std::vector<PassCosts> uneven = same;
    uneven.back() = {3.0, 6.0, split ? 1.5 : 0.0};
    const double S = 2;
    const SimResult shared = simulate(s, uneven, S);
    const SimResult dedicated = simulate(s, uneven, 1);
    double work = 0, busiest = 0;
    for (const PassCosts& c : uneven) {
      const double rank = (c.forward + c.backward + c.weight) * s.micro_batches * s.chunks;
      work += rank;
      busiest = std::max(busiest, rank);
    }
    if (s.stages > 1) {
      EXPECT_LT(shared.makespan, dedicated.makespan) << str(s);
    } else {
      EXPECT_EQ(shared.makespan, dedicated.makespan) << str(s);  // no one lends
    }
    EXPECT_GE(shared.makespan, work / s.stages * (1 - 1e-9)) << str(s);
    EXPECT_GE(shared.makespan, busiest / S * (1 - 1e-9)) << str(s);
  }
  // One micro-batch through 2 stages runs one pass at a time, each at S times its rate.
  const ScheduleShape serial{ScheduleKind::gpipe, 2, 1, 1};
  const std::vector<PassCosts> costs = {{1.0, 2.0, 0.0}, {1.5, 3.0, 0.0}};
  EXPECT_NEAR(simulate(serial, costs, 2).makespan, 7.5 / 2, 1e-12);
  EXPECT_NEAR(simulate(serial, costs, 1).makespan, 7.5, 1e-12);
}

}  // namespace
}  // namespace braid::parallel::pipeline
