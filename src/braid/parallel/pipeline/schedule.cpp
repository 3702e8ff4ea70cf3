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

namespace {

// Note [Shared cores]: on a CPU node with more ranks than cores (S = ranks / cores > 1, one
// thread each) every rank works at 1 / S of a core while all work; a rank waiting in the bubble
// sleeps (Note [Sleeping in barriers]) and the kernel gives its share to the ranks that work:
// with k of p stages working, each runs min(S, p / k) times its all-busy rate. The simulation
// below advances from one pass's end to the next at those rates (processor sharing). Measured
// against the static bound it replaced (the larger of the total work over the cores and the
// slowest stage's path at a core's rate), which let the slowest stage run alone whenever the
// others could wait: the 4-stage zb_h1 pipelines on 4 ranks of 2 cores ran 20% slower than that
// bound, because the others work beside it most of the time.
SimResult run_schedule(const ScheduleShape& s, const std::vector<std::vector<Action>>& actions,
                       const std::vector<PassCosts>& costs, double max_speedup) {
  check_schedule(s);
  const int p = s.stages, m = s.micro_batches, V = s.virtual_stages();
  BRAID_CHECK(static_cast<int>(actions.size()) == p, "pipeline simulate: ", actions.size(),
              " action lists for ", p, " stages");
  BRAID_CHECK(static_cast<int>(costs.size()) == p, "pipeline simulate: ", costs.size(),
              " stage costs for ", p, " stages");
  for (const PassCosts& c : costs)
    BRAID_CHECK(c.forward >= 0 && c.backward >= 0 && c.weight >= 0, "pipeline simulate: costs ",
                c.forward, ", ", c.backward, " and ", c.weight, " must be >= 0");
  BRAID_CHECK(max_speedup >= 1, "pipeline simulate: max_speedup ", max_speedup, " must be >= 1");
  const bool split = has_weight_passes(s.kind);
  // When forward / backward (micro, vs) ended, at [vs * m + micro]; negative until it has.
  std::vector<double> forward_end(static_cast<size_t>(V * m), -1);
  std::vector<double> backward_end(static_cast<size_t>(V * m), -1);
  auto at = [&](int micro, int vs) { return static_cast<size_t>(vs * m + micro); };
  struct Rank {
    size_t next = 0;
    bool running = false;
    double left = 0;  // of the running pass, in cost units
    double busy = 0;  // time spent running passes
    int in_flight = 0, max_in_flight = 0;
  };
  std::vector<Rank> ranks(static_cast<size_t>(p));
  auto action_of = [&](int r) -> const Action& {
    return actions[static_cast<size_t>(r)][ranks[static_cast<size_t>(r)].next];
  };
  auto done = [&](int r) {
    return ranks[static_cast<size_t>(r)].next == actions[static_cast<size_t>(r)].size();
  };

  // Starts rank r's next action if it is free and the action's inputs are there.
  auto start = [&](int r) {
    Rank& rank = ranks[static_cast<size_t>(r)];
    if (rank.running || done(r)) return false;
    const Action& a = action_of(r);
    BRAID_CHECK(a.micro >= 0 && a.micro < m && a.chunk >= 0 && a.chunk < s.chunks,
                "pipeline simulate: rank ", r, " has action ", action_name(a), " outside m ", m,
                ", v ", s.chunks);
    BRAID_CHECK(split || a.kind != Action::Kind::weight, "pipeline simulate: rank ", r,
                " has action ", action_name(a), " but ", schedule_name(s.kind),
                " has no weight passes");
    const int vs = virtual_stage(s, r, a.chunk);
    const bool forward = a.kind == Action::Kind::forward;
    const bool weight = a.kind == Action::Kind::weight;
    bool ready = true;
    if (forward) {
      ready = vs == 0 || forward_end[at(a.micro, vs - 1)] >= 0;
    } else if (weight) {
      ready = backward_end[at(a.micro, vs)] >= 0;
    } else {
      ready = forward_end[at(a.micro, vs)] >= 0 &&
              (vs == V - 1 || backward_end[at(a.micro, vs + 1)] >= 0);
    }
    if (!ready) return false;
    const PassCosts& c = costs[static_cast<size_t>(r)];
    rank.left = forward ? c.forward : weight ? c.weight : c.backward;
    rank.running = true;
    // A micro-batch is held from its forward to its last pass (W where there are weight passes).
    rank.in_flight += forward ? 1 : (weight || !split) ? -1 : 0;
    rank.max_in_flight = std::max(rank.max_in_flight, rank.in_flight);
    return true;
  };
  auto finish = [&](int r, double now) {
    Rank& rank = ranks[static_cast<size_t>(r)];
    const Action& a = action_of(r);
    const int vs = virtual_stage(s, r, a.chunk);
    if (a.kind == Action::Kind::forward) forward_end[at(a.micro, vs)] = now;
    if (a.kind == Action::Kind::backward) backward_end[at(a.micro, vs)] = now;
    rank.running = false;
    ++rank.next;
  };

  double now = 0;
  for (;;) {
    // Start what can start; passes of no cost end at once and may free others.
    for (bool progressed = true; progressed;) {
      progressed = false;
      for (int r = 0; r < p; ++r) {
        if (!start(r)) continue;
        progressed = true;
        if (ranks[static_cast<size_t>(r)].left <= 0) finish(r, now);
      }
    }
    int working = 0;
    double first_end = 0;
    for (const Rank& rank : ranks) {
      if (!rank.running) continue;
      first_end = working == 0 ? rank.left : std::min(first_end, rank.left);
      ++working;
    }
    if (working == 0) break;
    const double rate = std::min(max_speedup, double(p) / working);
    const double dt = first_end / rate;
    now += dt;
    for (int r = 0; r < p; ++r) {
      Rank& rank = ranks[static_cast<size_t>(r)];
      if (!rank.running) continue;
      rank.busy += dt;
      rank.left -= dt * rate;
      if (rank.left <= first_end * 1e-12) finish(r, now);
    }
  }
  std::string stuck;
  for (int r = 0; r < p; ++r) {
    if (!done(r))
      stuck += (stuck.empty() ? " rank " : ", rank ") + std::to_string(r) + " waits at " +
               action_name(action_of(r));
  }
  BRAID_CHECK(stuck.empty(), "pipeline schedule ", schedule_name(s.kind), " (p ", p, ", m ", m,
              ", v ", s.chunks, ") deadlocks:", stuck);

  SimResult out;
  out.makespan = now;
  for (const Rank& rank : ranks) {
    out.idle_fraction.push_back(now > 0 ? 1.0 - rank.busy / now : 0);
    out.max_in_flight.push_back(rank.max_in_flight);
  }
  return out;
}

std::vector<std::vector<Action>> schedule_actions(const ScheduleShape& s) {
  std::vector<std::vector<Action>> actions;
  for (int r = 0; r < s.stages; ++r) actions.push_back(stage_actions(s, r));
  return actions;
}

}  // namespace

SimResult simulate(const ScheduleShape& s, double forward_cost, double backward_cost,
                   double weight_cost) {
  return simulate(s, schedule_actions(s), forward_cost, backward_cost, weight_cost);
}

SimResult simulate(const ScheduleShape& s, const std::vector<std::vector<Action>>& actions,
                   double forward_cost, double backward_cost, double weight_cost) {
  BRAID_CHECK(forward_cost >= 0 && backward_cost >= 0 && weight_cost >= 0,
              "pipeline simulate: costs ", forward_cost, ", ", backward_cost, " and ", weight_cost,
              " must be >= 0");
  const bool split = has_weight_passes(s.kind);
  const PassCosts c{forward_cost, split ? backward_cost : backward_cost + weight_cost, weight_cost};
  return run_schedule(s, actions, std::vector<PassCosts>(static_cast<size_t>(s.stages), c), 1);
}

SimResult simulate(const ScheduleShape& s, const std::vector<PassCosts>& costs,
                   double max_speedup) {
  return run_schedule(s, schedule_actions(s), costs, max_speedup);
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
