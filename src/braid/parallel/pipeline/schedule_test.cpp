// The pipeline schedules as action lists: complete, deadlock free, each chunk's micro-batches in
// order (Note [Pipeline messages]), 1f1b's in-flight bound, and the simulated bubble against the
// textbook formula.
#include "braid/parallel/pipeline/schedule.h"

#include <gtest/gtest.h>

#include <set>

#include "braid/core/error.h"

namespace braid::parallel::pipeline {
namespace {

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

TEST(PipelineSchedule, EveryActionOnceAndEachChunkInMicroOrder) {
  for (const ScheduleShape& s : shapes()) {
    for (int r = 0; r < s.stages; ++r) {
      const auto actions = stage_actions(s, r);
      ASSERT_EQ(actions.size(), static_cast<size_t>(2 * s.micro_batches * s.chunks)) << str(s);
      std::set<std::tuple<int, int, int>> seen;
      std::vector<int> last_f(static_cast<size_t>(s.chunks), -1);
      std::vector<int> last_b(static_cast<size_t>(s.chunks), -1);
      for (const Action& a : actions) {
        const bool fwd = a.kind == Action::Kind::forward;
        EXPECT_TRUE(seen.insert({fwd, a.micro, a.chunk}).second) << str(s);
        int& last =
            fwd ? last_f[static_cast<size_t>(a.chunk)] : last_b[static_cast<size_t>(a.chunk)];
        EXPECT_EQ(a.micro, last + 1) << str(s) << " rank " << r;
        last = a.micro;
      }
    }
  }
}

TEST(PipelineSchedule, NoDeadlockAndTheBubbleOfTheFormula) {
  for (const ScheduleShape& s : shapes()) {
    const SimResult sim = simulate(s, 1.0, 2.0);
    // Rank 0 starts first and ends last: its idle time is the pipeline's bubble.
    const double tol = s.kind == ScheduleKind::interleaved_1f1b ? 0.02 : 1e-9;
    EXPECT_NEAR(sim.idle_fraction[0], ideal_bubble(s), tol) << str(s);
  }
}

TEST(PipelineSchedule, InFlightMicroBatches) {
  for (int p : {2, 4})
    for (int m : {1, 3, 8}) {
      const SimResult g = simulate({ScheduleKind::gpipe, p, m, 1}, 1, 2);
      const SimResult f = simulate({ScheduleKind::one_f_one_b, p, m, 1}, 1, 2);
      for (int r = 0; r < p; ++r) {
        EXPECT_EQ(g.max_in_flight[static_cast<size_t>(r)], m);
        EXPECT_EQ(f.max_in_flight[static_cast<size_t>(r)], std::min(p - r, m)) << p << " " << m;
      }
    }
}

TEST(PipelineSchedule, ErrorsNameTheKey) {
  auto message = [](const ScheduleShape& s) {
    try {
      check_schedule(s);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({ScheduleKind::interleaved_1f1b, 4, 6, 2})
                .find("training.gradient_accumulation_steps (6) to be a multiple of "
                      "parallel.pipeline_parallel_size (4)"),
            std::string::npos);
  EXPECT_NE(message({ScheduleKind::one_f_one_b, 2, 4, 2}).find("parallel.pipeline_virtual_stages"),
            std::string::npos);
  EXPECT_NE(message({ScheduleKind::interleaved_1f1b, 2, 4, 1})
                .find("parallel.pipeline_virtual_stages >= 2"),
            std::string::npos);
  EXPECT_NE(message({ScheduleKind::gpipe, 2, 0, 1}).find("training.gradient_accumulation_steps"),
            std::string::npos);
  try {
    schedule_from_name("zb");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'parallel.pipeline_schedule' is 'zb', expected one of: "
                                         "gpipe, 1f1b, interleaved_1f1b"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace braid::parallel::pipeline
