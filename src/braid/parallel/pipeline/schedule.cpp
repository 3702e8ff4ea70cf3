#include "braid/parallel/pipeline/schedule.h"

#include <algorithm>
#include <map>

#include "braid/core/error.h"

namespace braid::parallel::pipeline {

ScheduleKind schedule_from_name(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::gpipe;
  if (name == "1f1b") return ScheduleKind::one_f_one_b;
  if (name == "interleaved_1f1b") return ScheduleKind::interleaved_1f1b;
  BRAID_THROW("config key 'parallel.pipeline_schedule' is '", name,
              "', expected one of: gpipe, 1f1b, interleaved_1f1b");
}

const char* schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::gpipe:
      return "gpipe";
    case ScheduleKind::one_f_one_b:
      return "1f1b";
    case ScheduleKind::interleaved_1f1b:
      return "interleaved_1f1b";
  }
  return "?";
}

void check_schedule(const ScheduleShape& s) {
  BRAID_CHECK(s.stages >= 1, "parallel.pipeline_parallel_size must be >= 1, got ", s.stages);
  BRAID_CHECK(s.micro_batches >= 1,
              "training.gradient_accumulation_steps (the pipeline's "
              "micro-batches) must be >= 1, got ",
              s.micro_batches);
  if (s.kind != ScheduleKind::interleaved_1f1b) {
    BRAID_CHECK(s.chunks == 1, "parallel.pipeline_virtual_stages ", s.chunks,
                " needs "
                "parallel.pipeline_schedule: interleaved_1f1b (",
                schedule_name(s.kind), " runs one chunk per rank)");
    return;
  }
  BRAID_CHECK(s.chunks >= 2,
              "parallel.pipeline_schedule: interleaved_1f1b needs "
              "parallel.pipeline_virtual_stages >= 2, got ",
              s.chunks);
  BRAID_CHECK(s.micro_batches % s.stages == 0,
              "parallel.pipeline_schedule: interleaved_1f1b "
              "needs training.gradient_accumulation_steps (",
              s.micro_batches,
              ") to be a multiple "
              "of parallel.pipeline_parallel_size (",
              s.stages, ")");
}

namespace {

std::vector<Action> one_f_one_b(int p, int m, int stage) {
  const int warmup = std::min(p - stage - 1, m);
  std::vector<Action> out;
  for (int i = 0; i < warmup; ++i) out.push_back({Action::Kind::forward, i, 0});
  for (int i = 0; i < m - warmup; ++i) {
    out.push_back({Action::Kind::forward, warmup + i, 0});
    out.push_back({Action::Kind::backward, i, 0});
  }
  for (int i = m - warmup; i < m; ++i) out.push_back({Action::Kind::backward, i, 0});
  return out;
}

// Megatron's forward_backward_pipelining_with_interleaving: the k-th forward (or backward) of a
// rank is micro-batch group * p + k % p of chunk (k % (p v)) / p (reversed for backwards).
std::vector<Action> interleaved(int p, int m, int v, int stage) {
  const int total = m * v;
  auto action = [&](int k, bool forward) {
    const int in_group = k % (p * v);
    int chunk = in_group / p;
    if (!forward) chunk = v - 1 - chunk;
    const int micro = k / (p * v) * p + k % p;
    return Action{forward ? Action::Kind::forward : Action::Kind::backward, micro, chunk};
  };
  const int warmup = m == p ? total : std::min((p - stage - 1) * 2 + (v - 1) * p, total);
  std::vector<Action> out;
  for (int k = 0; k < warmup; ++k) out.push_back(action(k, true));
  for (int i = 0; i < total - warmup; ++i) {
    out.push_back(action(warmup + i, true));
    out.push_back(action(i, false));
  }
  for (int k = total - warmup; k < total; ++k) out.push_back(action(k, false));
  return out;
}

}  // namespace

std::vector<Action> stage_actions(const ScheduleShape& s, int stage) {
  check_schedule(s);
  BRAID_CHECK(stage >= 0 && stage < s.stages, "stage_actions: stage ", stage, " outside [0, ",
              s.stages, ")");
  const int p = s.stages, m = s.micro_batches;
  switch (s.kind) {
    case ScheduleKind::gpipe: {
      std::vector<Action> out;
      for (int i = 0; i < m; ++i) out.push_back({Action::Kind::forward, i, 0});
      for (int i = 0; i < m; ++i) out.push_back({Action::Kind::backward, i, 0});
      return out;
    }
    case ScheduleKind::one_f_one_b:
      return one_f_one_b(p, m, stage);
    case ScheduleKind::interleaved_1f1b:
      return interleaved(p, m, s.chunks, stage);
  }
  return {};
}

SimResult simulate(const ScheduleShape& s, double forward_cost, double backward_cost) {
  const int p = s.stages, V = s.virtual_stages();
  std::vector<std::vector<Action>> actions;
  for (int r = 0; r < p; ++r) actions.push_back(stage_actions(s, r));
  // End times of finished actions, by (kind, micro, virtual stage).
  std::map<std::tuple<int, int, int>, double> done;
  auto end_of = [&](Action::Kind k, int m, int vs) -> const double* {
    auto it = done.find({static_cast<int>(k), m, vs});
    return it == done.end() ? nullptr : &it->second;
  };
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<double> free_at(static_cast<size_t>(p), 0), busy(static_cast<size_t>(p), 0);
  std::vector<int> in_flight(static_cast<size_t>(p), 0);
  SimResult out;
  out.max_in_flight.assign(static_cast<size_t>(p), 0);
  size_t remaining = 0;
  for (const auto& a : actions) remaining += a.size();
  while (remaining > 0) {
    bool progressed = false;
    for (int r = 0; r < p; ++r) {
      auto& i = next[static_cast<size_t>(r)];
      while (i < actions[static_cast<size_t>(r)].size()) {
        const Action& a = actions[static_cast<size_t>(r)][i];
        const int vs = a.chunk * p + r;
        double ready = free_at[static_cast<size_t>(r)];
        std::vector<const double*> deps;
        if (a.kind == Action::Kind::forward) {
          if (vs > 0) deps.push_back(end_of(Action::Kind::forward, a.micro, vs - 1));
        } else {
          deps.push_back(end_of(Action::Kind::forward, a.micro, vs));
          if (vs < V - 1) deps.push_back(end_of(Action::Kind::backward, a.micro, vs + 1));
        }
        if (std::find(deps.begin(), deps.end(), nullptr) != deps.end()) break;
        for (const double* d : deps) ready = std::max(ready, *d);
        const bool fwd = a.kind == Action::Kind::forward;
        const double cost = fwd ? forward_cost : backward_cost;
        done[{static_cast<int>(a.kind), a.micro, vs}] = ready + cost;
        free_at[static_cast<size_t>(r)] = ready + cost;
        busy[static_cast<size_t>(r)] += cost;
        int& f = in_flight[static_cast<size_t>(r)];
        f += fwd ? 1 : -1;
        out.max_in_flight[static_cast<size_t>(r)] =
            std::max(out.max_in_flight[static_cast<size_t>(r)], f);
        ++i;
        --remaining;
        progressed = true;
      }
    }
    if (!progressed) {
      std::string stuck;
      for (int r = 0; r < p; ++r) {
        const auto i = next[static_cast<size_t>(r)];
        if (i >= actions[static_cast<size_t>(r)].size()) continue;
        const Action& a = actions[static_cast<size_t>(r)][i];
        stuck += " rank " + std::to_string(r) + ": " +
                 (a.kind == Action::Kind::forward ? "F" : "B") + std::to_string(a.micro) + "c" +
                 std::to_string(a.chunk);
      }
      BRAID_THROW("pipeline schedule ", schedule_name(s.kind), " deadlocks:", stuck);
    }
  }
  for (double t : free_at) out.makespan = std::max(out.makespan, t);
  for (int r = 0; r < p; ++r)
    out.idle_fraction.push_back(1.0 - busy[static_cast<size_t>(r)] / out.makespan);
  return out;
}

double ideal_bubble(const ScheduleShape& s) {
  const double p = s.stages, m = s.micro_batches;
  const double v = s.kind == ScheduleKind::interleaved_1f1b ? s.chunks : 1;
  return (p - 1) / (v * m + p - 1);
}

}  // namespace braid::parallel::pipeline
