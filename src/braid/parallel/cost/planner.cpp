#include "braid/parallel/cost/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "braid/core/error.h"

namespace braid::parallel::cost {

namespace {

std::vector<int> divisors(int64_t n) {
  std::vector<int> d;
  for (int64_t i = 1; i <= n; ++i) {
    if (n % i == 0) d.push_back(static_cast<int>(i));
  }
  return d;
}

// How many parallel dimensions and extras a layout uses (Note [Plan ranking]).
int complexity(const Layout& L) {
  return (L.tp > 1) + (L.sp ? 1 : 0) + (L.pp > 1) + (L.virtual_stages > 1) + (L.cp > 1);
}

bool simpler(const Candidate& a, const Candidate& b) {
  const Layout &x = a.layout, &y = b.layout;
  if (complexity(x) != complexity(y)) return complexity(x) < complexity(y);
  if (x.offload != y.offload) return !x.offload;
  const bool cx = x.checkpointing != "none", cy = y.checkpointing != "none";
  if (cx != cy) return !cx;
  auto sharding = [](const std::string& s) {
    const std::vector<std::string> order = {"none", "ddp", "zero1", "zero2", "zero3", "hsdp"};
    return std::find(order.begin(), order.end(), s) - order.begin();
  };
  if (sharding(x.strategy) != sharding(y.strategy))
    return sharding(x.strategy) < sharding(y.strategy);
  return x.micro_batch > y.micro_batch;
}

std::string gib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return b;
}

std::string pct(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f%%", x * 100);
  return b;
}

// The component in which b is slower than a by the most, as "comm exposed +12 ms".
std::string biggest_difference(const StepCost& a, const StepCost& b) {
  const auto ca = a.components(), cb = b.components();
  size_t best = 0;
  double diff = -INFINITY;
  for (size_t i = 0; i < ca.size(); ++i) {
    if (cb[i].second - ca[i].second > diff) {
      diff = cb[i].second - ca[i].second;
      best = i;
    }
  }
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s %+.1f ms", ca[best].first.c_str(), diff * 1e3);
  return buf;
}

}  // namespace

std::vector<Layout> enumerate_layouts(const PlanRequest& q) {
  BRAID_CHECK(q.world >= 1, "--world-size must be >= 1, got ", q.world);
  BRAID_CHECK(q.hosts >= 1 && q.world % q.hosts == 0, "--hosts ", q.hosts,
              " must divide --world-size ", q.world);
  BRAID_CHECK(q.global_batch >= 1, "--global-batch must be >= 1, got ", q.global_batch);
  BRAID_CHECK(q.seq_len >= 1, "--seq-len must be >= 1, got ", q.seq_len);
  const int node_ranks = q.world / q.hosts;
  std::vector<Layout> out;
  // Context parallelism stays inside a node too (its ring hops and all-to-alls are per layer).
  std::vector<std::pair<int, std::string>> contexts = {{1, "ring"}};
  for (int cp : divisors(q.world)) {
    if (cp == 1 || cp > node_ranks || (q.max_context_parallel > 0 && cp > q.max_context_parallel))
      continue;
    for (const char* mode : {"ring", "ulysses"}) contexts.emplace_back(cp, mode);
  }
  // The model-parallel shapes: tp and cp inside a node, pp anywhere.
  std::vector<Layout> meshes;
  for (int tp : divisors(q.world)) {
    if (tp > node_ranks) continue;  // tensor parallelism stays inside a node
    for (int pp : divisors(q.world / tp)) {
      for (const auto& [cp, cp_mode] : contexts) {
        if ((q.world / (tp * pp)) % cp != 0 || tp * cp > node_ranks) continue;
        Layout M;
        M.tp = tp;
        M.pp = pp;
        M.cp = cp;
        M.cp_mode = cp_mode;
        meshes.push_back(M);
      }
    }
  }
  for (const Layout& M : meshes) {
    const int dp = q.world / (M.tp * M.pp * M.cp);
    if (q.global_batch % dp != 0) continue;
    const int64_t per_dp = q.global_batch / dp;
    std::vector<std::string> strategies = {"ddp", "zero1", "zero2", "zero3"};
    if (dp == 1) strategies = {"none"};
    // Hybrid sharding: shard groups of the data-parallel ranks inside one node.
    const int node_group = node_ranks / (M.tp * M.pp * M.cp);
    if (dp > 1 && q.hosts > 1 && node_group >= 2 && dp % node_group == 0) {
      strategies.push_back("hsdp");
    }
    std::vector<std::pair<std::string, int>> schedules = {{"1f1b", 1}};
    if (M.pp > 1) {
      schedules = {{"gpipe", 1}, {"1f1b", 1}, {"interleaved_1f1b", 2}, {"zb_h1", 1}, {"zb_v", 2}};
    }
    for (const auto& strategy : strategies) {
      for (bool sp : {false, true}) {
        if (sp && M.tp == 1) continue;
        for (const auto& [schedule, v] : schedules) {
          for (int b : divisors(per_dp)) {
            if (q.max_micro_batch > 0 && b > q.max_micro_batch) continue;
            for (DType dt : q.precisions) {
              for (const auto& ckpt : q.checkpointing) {
                for (bool off : {false, true}) {
                  if (off && (!q.offload || strategy == "none" || strategy == "ddp")) continue;
                  Layout L = M;
                  L.strategy = strategy;
                  if (strategy == "hsdp") L.shard_group = node_group;
                  L.sp = sp;
                  L.schedule = schedule;
                  L.virtual_stages = v;
                  L.micro_batch = b;
                  L.accumulation = per_dp / b;
                  L.compute = dt;
                  L.checkpointing = ckpt;
                  L.offload = off;
                  L.balanced = M.pp > 1 && q.model.n_layer % (M.pp * v) != 0;
                  CostInputs in{q.model, L, q.world, q.hosts, q.seq_len};
                  if (layout_problem(in).empty()) out.push_back(L);
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

MemoryEstimate layout_memory(const PlanRequest& q, const Layout& L) {
  MemoryEstimateInputs in;
  in.model = q.model;
  in.model.activation_checkpointing = nn::CheckpointPolicy::parse(L.checkpointing);
  in.spec = L.to_plan(q.seq_len);
  in.world_size = q.world;
  in.compute = L.compute;
  in.micro_batches = L.accumulation;
  in.threads = 1;
  return estimate_memory(in);
}

int64_t plan_budget(const PlanRequest& q, const MachineProfile& profile) {
  return q.budget > 0 ? q.budget : profile.rank_memory(q.world / q.hosts);
}

Candidate evaluate_layout(const PlanRequest& q, const Layout& layout, const MachineProfile& profile,
                          int64_t budget) {
  Candidate c;
  c.layout = layout;
  c.cost = predict_step(CostInputs{q.model, layout, q.world, q.hosts, q.seq_len}, profile);
  c.memory = layout_memory(q, layout);
  c.fits = c.memory.total() <= budget;
  return c;
}

PlanResult plan_layouts(const PlanRequest& q, const MachineProfile& profile) {
  PlanResult result;
  const auto layouts = enumerate_layouts(q);
  BRAID_CHECK(!layouts.empty(), "no layout of ", q.world,
              " ranks runs this model with a global batch of ", q.global_batch,
              " (each layout's data-parallel ranks must divide it, tp the heads, pp the layers)");
  result.budget = plan_budget(q, profile);
  const bool disk = profile.disk_read_gbs > 0 && profile.disk_write_gbs > 0;
  for (const auto& L : layouts) {
    if (L.offload && !disk) continue;  // a profile without a disk plans no offload
    Candidate c = evaluate_layout(q, L, profile, result.budget);
    (c.fits ? result.ranked : result.too_big).push_back(std::move(c));
  }
  std::stable_sort(
      result.ranked.begin(), result.ranked.end(),
      [](const Candidate& a, const Candidate& b) { return a.cost.step < b.cost.step; });
  // Note [Plan ranking]: the simplest layout within 1% of the fastest goes first; the rest stay
  // in order of time.
  if (!result.ranked.empty()) {
    const double limit = result.ranked.front().cost.step * 1.01;
    size_t pick = 0;
    for (size_t i = 1; i < result.ranked.size() && result.ranked[i].cost.step <= limit; ++i) {
      if (simpler(result.ranked[i], result.ranked[pick])) pick = i;
    }
    std::rotate(result.ranked.begin(), result.ranked.begin() + static_cast<std::ptrdiff_t>(pick),
                result.ranked.begin() + static_cast<std::ptrdiff_t>(pick) + 1);
  }
  std::sort(
      result.too_big.begin(), result.too_big.end(),
      [](const Candidate& a, const Candidate& b) { return a.memory.total() < b.memory.total(); });
  return result;
}

std::string explain_choice(const PlanResult& r) {
  std::ostringstream os;
  if (r.ranked.empty()) {
    os << "No layout fits " << gib(double(r.budget)) << " per rank";
    if (!r.too_big.empty()) {
      os << "; the smallest, " << r.too_big.front().layout.name() << ", needs "
         << gib(double(r.too_big.front().memory.total()));
    }
    os << ".\n";
    return os.str();
  }
  const Candidate& first = r.ranked.front();
  os << "Chosen: " << first.layout.name() << " of " << r.ranked.size() << " layouts that fit "
     << gib(double(r.budget)) << " per rank (" << r.too_big.size() << " do not).\n";
  if (r.ranked.size() > 1) {
    const Candidate& next = r.ranked[1];
    os << "  next: " << next.layout.name() << ", ";
    if (next.cost.step < first.cost.step) {
      // Note [Plan ranking]: within 1% the simpler layout goes first.
      os << pct(1 - next.cost.step / first.cost.step)
         << " faster, within the 1% where the simpler layout is preferred\n";
    } else {
      os << pct(next.cost.step / first.cost.step - 1) << " slower ("
         << biggest_difference(first.cost, next.cost) << ")\n";
    }
  }
  // The plain data-parallel layout of the same precision: how much the choice gains, or why
  // it is not taken.
  for (const char* plain : {"ddp", "none"}) {
    auto is_plain = [&](const Candidate& c) {
      return c.layout.strategy == plain && c.layout.tp == 1 && c.layout.pp == 1 &&
             c.layout.checkpointing == "none" && c.layout.compute == first.layout.compute;
    };
    auto it = std::find_if(r.ranked.begin(), r.ranked.end(), is_plain);
    if (it != r.ranked.end()) {
      if (&*it != &first) {
        os << "  " << plain << " (" << it->layout.name()
           << "): " << pct(it->cost.step / first.cost.step - 1) << " slower ("
           << biggest_difference(first.cost, it->cost) << ")\n";
      }
      break;
    }
    auto big = std::find_if(r.too_big.begin(), r.too_big.end(), is_plain);
    if (big != r.too_big.end()) {
      os << "  " << plain << " does not fit: " << big->layout.name() << " needs "
         << gib(double(big->memory.total())) << " per rank\n";
      break;
    }
  }
  return os.str();
}

}  // namespace braid::parallel::cost
