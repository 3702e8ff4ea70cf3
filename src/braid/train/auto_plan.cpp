#include "braid/train/auto_plan.h"

#include <cstdio>

#include "braid/core/error.h"
#include "braid/core/memory_tracker.h"
#include "braid/parallel/cost/planner.h"
#include "braid/train/trainer.h"

namespace braid::train {

std::string resolve_auto_plan(config::TrainConfig& cfg, int world_size, int hosts) {
  namespace cost = parallel::cost;
  if (cfg.parallel.strategy != "auto") return "";
  const int64_t global = cfg.training.global_batch_size;
  BRAID_CHECK(global > 0,
              "parallel.strategy: auto needs training.global_batch_size (the sequences of a step; "
              "the plan chooses micro-batch and accumulation)");
  BRAID_CHECK(cfg.training.precision == "fp32" || cfg.training.precision == "bf16",
              "parallel.strategy: auto plans fp32 and bf16 runs, not training.precision '",
              cfg.training.precision, "'");
  const std::string path = cost::default_profile_path();
  cost::MachineProfile machine;
  try {
    machine = cost::load_profile(path);
  } catch (const Error& e) {
    BRAID_THROW("parallel.strategy: auto: ", e.what());
  }
  cost::PlanRequest q;
  q.model = model_config_from(cfg);
  q.world = world_size;
  q.hosts = hosts;
  q.seq_len = cfg.data.seq_len;
  q.global_batch = global;
  q.precisions = {cfg.compute_dtype()};
  if (!cfg.memory.budget.empty()) q.budget = parse_bytes(cfg.memory.budget);
  const cost::PlanResult r = cost::plan_layouts(q, machine);
  BRAID_CHECK(!r.ranked.empty(), "parallel.strategy: auto: ", cost::explain_choice(r));
  const cost::Candidate& c = r.ranked.front();
  for (const auto& [key, value] : c.layout.config_values()) {
    config::apply_override(cfg, key + "=" + value);
  }
  char line[256];
  std::snprintf(line, sizeof line,
                "plan: %s, predicted %.1f ms/step, %.0f tokens/s, %.2f GiB per rank (of %zu "
                "layouts that fit; braid plan --config ... --world-size %d for the table)",
                c.layout.name().c_str(), c.cost.step * 1e3, c.cost.tokens_per_s,
                double(c.memory.total()) / double(int64_t{1} << 30), r.ranked.size(), world_size);
  return line;
}

std::string auto_plan_line(const std::string& described) {
  const auto at = described.find("# plan: ");
  if (at == std::string::npos) return "";
  const auto end = described.find('\n', at);
  return described.substr(at + 2, end == std::string::npos ? std::string::npos : end - at - 2);
}

}  // namespace braid::train
