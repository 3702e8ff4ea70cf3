#include "braid/parallel/pipeline/schedule.h"

#include <algorithm>
#include <cstddef>

#include "braid/core/error.h"

namespace braid::parallel::pipeline {

ScheduleKind schedule_from_name(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::gpipe;
  if (name == "1f1b") return ScheduleKind::one_f_one_b;
  if (name == "interleaved_1f1b") return ScheduleKind::interleaved_1f1b;
  if (name == "zb_h1") return ScheduleKind::zb_h1;
  if (name == "zb_v") return ScheduleKind::zb_v;
  BRAID_THROW("config key 'parallel.pipeline_schedule' is '", name,
              "', expected one of: gpipe, 1f1b, interleaved_1f1b, zb_h1, zb_v");
}

const char* schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::gpipe:
      return "gpipe";
    case ScheduleKind::one_f_one_b:
      return "1f1b";
    case ScheduleKind::interleaved_1f1b:
      return "interleaved_1f1b";
    case ScheduleKind::zb_h1:
      return "zb_h1";
    case ScheduleKind::zb_v:
      return "zb_v";
  }
  return "?";
}

bool has_weight_passes(ScheduleKind kind) {
  return kind == ScheduleKind::zb_h1 || kind == ScheduleKind::zb_v;
}

int chunks_per_rank(const std::string& schedule, int configured) {
  return schedule == "zb_v" && configured == 1 ? 2 : configured;
}

int virtual_stage(const ScheduleShape& s, int stage, int chunk) {
  if (s.kind == ScheduleKind::zb_v && chunk == 1) return 2 * s.stages - 1 - stage;
  return chunk * s.stages + stage;
}

int stage_of(const ScheduleShape& s, int vs) {
  if (s.kind == ScheduleKind::zb_v && vs >= s.stages) return 2 * s.stages - 1 - vs;
  return vs % s.stages;
}

void check_schedule(const ScheduleShape& s) {
  BRAID_CHECK(s.stages >= 1, "parallel.pipeline_parallel_size must be >= 1, got ", s.stages);
  BRAID_CHECK(s.micro_batches >= 1,
              "training.gradient_accumulation_steps (the pipeline's micro-batches) must be >= 1, "
              "got ",
              s.micro_batches);
  if (s.kind == ScheduleKind::zb_v) {
    BRAID_CHECK(s.chunks == 2,
                "parallel.pipeline_schedule: zb_v runs two chunks per rank (its V), "
                "but parallel.pipeline_virtual_stages is ",
                s.chunks);
    return;
  }
  if (s.kind != ScheduleKind::interleaved_1f1b) {
    BRAID_CHECK(s.chunks == 1, "parallel.pipeline_virtual_stages ", s.chunks,
                " needs parallel.pipeline_schedule: interleaved_1f1b (", schedule_name(s.kind),
                " runs one chunk per rank)");
    return;
  }
  BRAID_CHECK(s.chunks >= 2,
              "parallel.pipeline_schedule: interleaved_1f1b needs "
              "parallel.pipeline_virtual_stages >= 2, got ",
              s.chunks);
  BRAID_CHECK(s.micro_batches % s.stages == 0,
              "parallel.pipeline_schedule: interleaved_1f1b needs "
              "training.gradient_accumulation_steps (",
              s.micro_batches, ") to be a multiple of parallel.pipeline_parallel_size (", s.stages,
              ")");
}

namespace {

// The order in which a rank runs its forwards (kind forward) or its backwards (kind backward).
// Interleaved, as Megatron's get_model_chunk_id: the k-th is micro-batch (k / (p v)) p + k % p
// of chunk (k % (p v)) / p, the chunks reversed for backwards.
std::vector<Action> in_order(const ScheduleShape& s, Action::Kind kind) {
  const int p = s.stages, v = s.chunks;
  std::vector<Action> out;
  for (int k = 0; k < s.micro_batches * v; ++k) {
    const int chunk = k % (p * v) / p;
    out.push_back(
        {kind, k / (p * v) * p + k % p, kind == Action::Kind::forward ? chunk : v - 1 - chunk});
  }
  return out;
}

// Forwards before the first backward.
int warmup(const ScheduleShape& s, int stage) {
  const int p = s.stages, m = s.micro_batches, v = s.chunks;
  switch (s.kind) {
    case ScheduleKind::gpipe:
      return m;
    case ScheduleKind::one_f_one_b:
    case ScheduleKind::zb_h1:
      return std::min(p - stage - 1, m);
    case ScheduleKind::interleaved_1f1b:
      return std::min(2 * (p - stage - 1) + (v - 1) * p, m * v);
    case ScheduleKind::zb_v:
      break;  // zb_v_actions
  }
  return m * v;
}

// ZB-H1 (Note [ZB-H1 bubble]): after each B, the W of the B `lag` before it; the last `lag`
// W's after the last B.
std::vector<Action> with_weight_passes(const std::vector<Action>& actions, int lag) {
  std::vector<Action> out;
  std::vector<Action> waiting;  // B's whose W has not been placed, oldest first
  for (const Action& a : actions) {
    out.push_back(a);
    if (a.kind != Action::Kind::backward) continue;
    waiting.push_back({Action::Kind::weight, a.micro, a.chunk});
    if (static_cast<int>(waiting.size()) > lag) {
      out.push_back(waiting.front());
      waiting.erase(waiting.begin());
    }
  }
  out.insert(out.end(), waiting.begin(), waiting.end());
  return out;
}

// Note [ZB-V]: the paper's order for rank r, over n = max(m, 2p - 1) micro-batches per chunk,
// then without the passes of micro-batches m and above.
std::vector<Action> zb_v_actions(const ScheduleShape& s, int r) {
  using K = Action::Kind;
  const int p = s.stages, m = s.micro_batches, n = std::max(m, 2 * p - 1);
  std::vector<Action> out;
  int next[3][2] = {};  // the next micro-batch per kind (F, B, W) and chunk
  auto add = [&](K kind, int chunk) {
    int& micro = next[static_cast<int>(kind)][chunk];
    if (micro < m) out.push_back({kind, micro, chunk});
    ++micro;
  };
  const int(&f)[2] = next[0];
  const int(&w)[2] = next[2];
  for (int i = 0; i < 2 * (p - r) - 1; ++i) add(K::forward, 0);
  for (int i = 0; i < r; ++i) {
    add(K::forward, 1);
    add(K::forward, 0);
  }
  for (int i = 0; i < p - r; ++i) {
    add(K::forward, 1);
    add(K::backward, 1);
    add(K::weight, 1);
  }
  while (f[1] < f[0] || f[0] < n) {
    if (f[0] < n) add(K::forward, 0);
    add(K::backward, 0);
    add(K::weight, 0);
    add(K::forward, 1);
    add(K::backward, 1);
    add(K::weight, 1);
  }
  for (int i = 0; i < r; ++i) {
    add(K::backward, 0);
    add(K::backward, 1);
  }
  for (int i = 0; i < p - r; ++i) {
    add(K::backward, 0);
    add(K::weight, 0);
  }
  while (w[1] < n) add(K::weight, 1);
  while (w[0] < n) add(K::weight, 0);
  return out;
}

}  // namespace

std::vector<Action> stage_actions(const ScheduleShape& s, int stage) {
  check_schedule(s);
  BRAID_CHECK(stage >= 0 && stage < s.stages, "pipeline: stage ", stage, " outside [0, ", s.stages,
              ") (parallel.pipeline_parallel_size ", s.stages, ")");
  if (s.kind == ScheduleKind::zb_v) return zb_v_actions(s, stage);
  // Warm-up forwards, then one forward and one backward in turn, then the remaining backwards.
  const std::vector<Action> forwards = in_order(s, Action::Kind::forward);
  const std::vector<Action> backwards = in_order(s, Action::Kind::backward);
  const size_t n = forwards.size(), w = static_cast<size_t>(warmup(s, stage));
  std::vector<Action> out(forwards.begin(), forwards.begin() + static_cast<std::ptrdiff_t>(w));
  for (size_t k = w; k < n; ++k) {
    out.push_back(forwards[k]);
    out.push_back(backwards[k - w]);
  }
  out.insert(out.end(), backwards.begin() + static_cast<std::ptrdiff_t>(n - w), backwards.end());
  if (s.kind == ScheduleKind::zb_h1) return with_weight_passes(out, stage);
  return out;
}

std::string action_name(const Action& a) {
  const char* kind = a.kind == Action::Kind::forward    ? "F m"
                     : a.kind == Action::Kind::backward ? "B m"
                                                        : "W m";
  return kind + std::to_string(a.micro) + " c" + std::to_string(a.chunk);
}

SimResult simulate(const ScheduleShape& s, double forward_cost, double backward_cost,
                   double weight_cost) {
  std::vector<std::vector<Action>> actions;
  for (int r = 0; r < s.stages; ++r) actions.push_back(stage_actions(s, r));
  return simulate(s, actions, forward_cost, backward_cost, weight_cost);
}

SimResult simulate(const ScheduleShape& s, const std::vector<std::vector<Action>>& actions,
                   double forward_cost, double backward_cost, double weight_cost) {
  check_schedule(s);
  BRAID_CHECK(static_cast<int>(actions.size()) == s.stages, "pipeline simulate: ", actions.size(),
              " action lists for ", s.stages, " stages");
  BRAID_CHECK(forward_cost >= 0 && backward_cost >= 0 && weight_cost >= 0,
              "pipeline simulate: costs ", forward_cost, ", ", backward_cost, " and ", weight_cost,
              " must be >= 0");
  const bool split = has_weight_passes(s.kind);
  if (!split) backward_cost += weight_cost;
  const int p = s.stages, m = s.micro_batches, V = s.virtual_stages();
  // When forward / backward (micro, vs) ended, at [vs * m + micro]; negative until it has run.
  std::vector<double> forward_end(static_cast<size_t>(V * m), -1);
  std::vector<double> backward_end(static_cast<size_t>(V * m), -1);
  auto at = [&](int micro, int vs) { return static_cast<size_t>(vs * m + micro); };
  struct Rank {
    const std::vector<Action>* actions = nullptr;
    size_t next = 0;
    double free_at = 0, busy = 0;
    int in_flight = 0, max_in_flight = 0;
  };
  std::vector<Rank> ranks(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r)
    ranks[static_cast<size_t>(r)].actions = &actions[static_cast<size_t>(r)];

  // Runs rank r's next action if there is one and its inputs are there.
  auto step = [&](int r) {
    Rank& rank = ranks[static_cast<size_t>(r)];
    if (rank.next == rank.actions->size()) return false;
    const Action& a = (*rank.actions)[rank.next];
    BRAID_CHECK(a.micro >= 0 && a.micro < m && a.chunk >= 0 && a.chunk < s.chunks,
                "pipeline simulate: rank ", r, " has action ", action_name(a), " outside m ", m,
                ", v ", s.chunks);
    BRAID_CHECK(split || a.kind != Action::Kind::weight, "pipeline simulate: rank ", r,
                " has action ", action_name(a), " but ", schedule_name(s.kind),
                " has no weight passes");
    const int vs = virtual_stage(s, r, a.chunk);
    const bool forward = a.kind == Action::Kind::forward;
    const bool weight = a.kind == Action::Kind::weight;
    // When what `a` waits for ended (0: nothing to wait for); negative if it has not run yet.
    double inputs[2] = {0, 0};
    if (forward) {
      if (vs > 0) inputs[0] = forward_end[at(a.micro, vs - 1)];
    } else if (weight) {
      inputs[0] = backward_end[at(a.micro, vs)];
    } else {
      inputs[0] = forward_end[at(a.micro, vs)];
      if (vs < V - 1) inputs[1] = backward_end[at(a.micro, vs + 1)];
    }
    if (inputs[0] < 0 || inputs[1] < 0) return false;
    const double ready = std::max({rank.free_at, inputs[0], inputs[1]});
    const double cost = forward ? forward_cost : weight ? weight_cost : backward_cost;
    if (!weight) (forward ? forward_end : backward_end)[at(a.micro, vs)] = ready + cost;
    rank.free_at = ready + cost;
    rank.busy += cost;
    // A micro-batch is held from its forward to its last pass (W where there are weight passes).
    rank.in_flight += forward ? 1 : (weight || !split) ? -1 : 0;
    rank.max_in_flight = std::max(rank.max_in_flight, rank.in_flight);
    ++rank.next;
    return true;
  };

  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int r = 0; r < p; ++r)
      while (step(r)) progressed = true;
  }
  std::string stuck;
  for (int r = 0; r < p; ++r) {
    const Rank& rank = ranks[static_cast<size_t>(r)];
    if (rank.next < rank.actions->size())
      stuck += (stuck.empty() ? " rank " : ", rank ") + std::to_string(r) + " waits at " +
               action_name((*rank.actions)[rank.next]);
  }
  BRAID_CHECK(stuck.empty(), "pipeline schedule ", schedule_name(s.kind), " (p ", p, ", m ", m,
              ", v ", s.chunks, ") deadlocks:", stuck);

  SimResult out;
  for (const Rank& rank : ranks) out.makespan = std::max(out.makespan, rank.free_at);
  for (const Rank& rank : ranks) {
    out.idle_fraction.push_back(out.makespan > 0 ? 1.0 - rank.busy / out.makespan : 0);
    out.max_in_flight.push_back(rank.max_in_flight);
  }
  return out;
}

double ideal_bubble(const ScheduleShape& s) {
  const double p = s.stages, m = s.micro_batches;
  if (s.kind == ScheduleKind::zb_h1)  // Note [ZB-H1 bubble], F = B = W
    return m >= p ? (p - 1) / (3 * m + p - 1) : 1 - 3 * m / (2 * m + 2 * p - 1);
  if (s.kind == ScheduleKind::zb_v)  // Note [ZB-V], F = B = W per chunk
    return 1 - 6 * m / std::max(6 * m + p - 1, 4 * m + 4 * p - 2);
  const double v = s.kind == ScheduleKind::interleaved_1f1b ? s.chunks : 1;
  return (p - 1) / (v * m + p - 1);
}

}  // namespace braid::parallel::pipeline
