// Pipeline schedules as per-stage action lists (pure functions), and a simulator that checks
// them and gives their textbook bubble.
//
// Virtual stage vs = chunk * p + stage: rank `stage` of p holds chunks 0..v-1, i.e. virtual
// stages stage, stage + p, ... (Megatron's interleaving). Forward (m, vs) needs forward
// (m, vs - 1); backward (m, vs) needs forward (m, vs) and backward (m, vs + 1).
//   gpipe             all forwards, then all backwards (both in micro order)
//   1f1b              PipeDream-flush: min(p - stage - 1, m) warm-up forwards, then one forward
//                     and one backward in turn, then the remaining backwards
//   interleaved_1f1b  Megatron's schedule with v chunks per rank: micro-batches in groups of p go
//                     through chunk 0, then chunk 1, ...; backwards take the chunks in reverse
// In every schedule a rank runs each chunk's forwards in micro order, and its backwards too
// (Note [Pipeline messages] relies on it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace braid::parallel::pipeline {

enum class ScheduleKind { gpipe, one_f_one_b, interleaved_1f1b };

// "gpipe" | "1f1b" | "interleaved_1f1b"; anything else throws naming parallel.pipeline_schedule.
ScheduleKind schedule_from_name(const std::string& name);
const char* schedule_name(ScheduleKind kind);

struct ScheduleShape {
  ScheduleKind kind = ScheduleKind::one_f_one_b;
  int stages = 1;         // p: pipeline_parallel_size
  int micro_batches = 1;  // m: gradient accumulation steps
  int chunks = 1;         // v: model chunks per rank (interleaved_1f1b)
  int virtual_stages() const { return stages * chunks; }
};

// Throws one line naming the config key: stages < 1, micro_batches < 1, chunks != 1 without
// interleaving, interleaving with chunks < 2 or micro_batches not a multiple of stages (as
// Megatron requires). 1f1b with fewer micro-batches than stages is fine (a shorter warm-up).
void check_schedule(const ScheduleShape& shape);

struct Action {
  enum class Kind : uint8_t { forward, backward };
  Kind kind = Kind::forward;
  int micro = 0;
  int chunk = 0;
  bool operator==(const Action&) const = default;
};

std::vector<Action> stage_actions(const ScheduleShape& shape, int stage);

struct SimResult {
  double makespan = 0;                // end of the last action anywhere
  std::vector<double> idle_fraction;  // per stage: 1 - busy / makespan
  std::vector<int> max_in_flight;     // per stage: most (micro, chunk) forwarded, not yet backward
};

// Every rank runs its actions in order; an action starts once its dependencies are done and
// its rank is free; forwards take forward_cost, backwards backward_cost, messages nothing.
// Throws naming each rank's stuck action if the schedule deadlocks.
SimResult simulate(const ScheduleShape& shape, double forward_cost, double backward_cost);

// (p - 1) / (m + p - 1) for gpipe and 1f1b; (p - 1) / (v m + p - 1) interleaved.
double ideal_bubble(const ScheduleShape& shape);

}  // namespace braid::parallel::pipeline
