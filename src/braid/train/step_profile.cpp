#include "braid/train/step_profile.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "braid/core/error.h"
#include "braid/kernels/op_profile.h"
#include "braid/launch/threads.h"
#include "braid/parallel/cost/machine_profile.h"
#include "braid/train/plan_config.h"

namespace braid::train {

namespace {

const std::vector<std::string>& parts() {
  static const std::vector<std::string> p = {
      "gemm",      "attention",    "memory-bound",    "loss",
      "optimizer", "comm exposed", "pipeline bubble", "other"};
  return p;
}

}  // namespace

std::string profile_part(const std::string& op) {
  if (op == "matmul" || op.starts_with("linear_")) return "gemm";
  if (op.starts_with("attention_")) return "attention";
  if (op.starts_with("lm_head_")) return "loss";
  if (op.ends_with("_step") || op.starts_with("sum_squares") || op == "max_abs") {
    return "optimizer";
  }
  return "memory-bound";
}

StepProfile::StepProfile(bool enabled, int warmup_steps)
    : enabled_(enabled), warmup_(warmup_steps) {
  if (enabled_) kernels::reset_op_totals();
}

StepProfile::~StepProfile() {
  if (on_) kernels::set_op_profiling(false);
}

void StepProfile::begin_step(int64_t index) {
  if (!enabled_ || index < warmup_) return;
  if (!started_) kernels::reset_op_totals();
  started_ = true;
  kernels::set_op_profiling(true);
  on_ = true;
}

// Only the steps count: evaluation, checkpoints and the end's GEMM peak are left out.
void StepProfile::end_step(double seconds, double exposed_comm_ms, double bubble) {
  if (!on_) return;
  kernels::set_op_profiling(false);
  on_ = false;
  ++steps_;
  step_s_ += seconds;
  comm_s_ += exposed_comm_ms / 1e3;
  if (bubble > 0) bubble_s_ += bubble * seconds;
}

std::map<std::string, double> StepProfile::measured_ms() const {
  std::map<std::string, double> ms;
  for (const auto& p : parts()) ms[p] = 0;
  if (steps_ == 0) return ms;
  double kernels_s = 0;
  for (const auto& t : kernels::op_totals()) {
    ms[profile_part(t.op)] += t.seconds * 1e3 / steps_;
    kernels_s += t.seconds;
  }
  ms["comm exposed"] = comm_s_ * 1e3 / steps_;
  ms["pipeline bubble"] = bubble_s_ * 1e3 / steps_;
  ms["other"] = (step_s_ - kernels_s - comm_s_ - bubble_s_) * 1e3 / steps_;
  ms["step"] = step_s_ * 1e3 / steps_;
  return ms;
}

std::string StepProfile::report(const std::optional<parallel::cost::StepCost>& predicted,
                                const std::string& prediction_note) const {
  const auto ms = measured_ms();
  std::map<std::string, double> pred;
  if (predicted) {
    for (const auto& [name, s] : predicted->components()) pred[name] = s * 1e3;
    pred["other"] = pred["overhead"] + pred["offload I/O"];
    pred["step"] = predicted->step * 1e3;
  }
  std::string out;
  char line[160];
  std::snprintf(line, sizeof line, "profile: rank 0, %lld steps after %d warm-up, ms per step\n",
                static_cast<long long>(steps_), warmup_);
  out += line;
  out += predicted ? "| part | measured | predicted | error |\n|---|---|---|---|\n"
                   : "| part | measured | share |\n|---|---|---|\n";
  std::vector<std::string> rows = parts();
  rows.push_back("step");
  for (const auto& p : rows) {
    const double m = ms.at(p);
    if (predicted) {
      const double q = pred[p];
      if (q > 0 && m > 0) {
        std::snprintf(line, sizeof line, "| %s | %.1f | %.1f | %+.0f%% |\n", p.c_str(), m, q,
                      100 * (q / m - 1));
      } else {
        std::snprintf(line, sizeof line, "| %s | %.1f | %.1f | |\n", p.c_str(), m, q);
      }
    } else {
      std::snprintf(line, sizeof line, "| %s | %.1f | %.1f%% |\n", p.c_str(), m,
                    ms.at("step") > 0 ? 100 * m / ms.at("step") : 0.0);
    }
    out += line;
  }
  if (!prediction_note.empty()) out += prediction_note + "\n";
  // The ops behind the parts, slowest first.
  auto totals = kernels::op_totals();
  std::sort(totals.begin(), totals.end(), [](const kernels::OpTotal& a, const kernels::OpTotal& b) {
    return a.seconds > b.seconds;
  });
  out += "| op | part | calls per step | ms per step |\n|---|---|---|---|\n";
  for (const auto& t : totals) {
    if (steps_ == 0) break;
    std::snprintf(line, sizeof line, "| %s | %s | %.1f | %.2f |\n", t.op.c_str(),
                  profile_part(t.op).c_str(), double(t.calls) / steps_, t.seconds * 1e3 / steps_);
    out += line;
  }
  return out;
}

std::string step_profile_report(const StepProfile& profile, const config::TrainConfig& cfg,
                                const nn::ModelConfig& model, int world) {
  namespace cost = parallel::cost;
  const std::string path = cost::default_profile_path();
  const cost::Layout layout = layout_from(cfg);
  std::optional<cost::StepCost> predicted;
  std::string note;
  try {
    const cost::MachineProfile machine = cost::load_profile(path);
    const int hosts = std::max(1, world / std::max(1, launch::local_world_size()));
    predicted = cost::predict_step(cost::CostInputs{model, layout, world, hosts, cfg.data.seq_len},
                                   machine);
    note = "predicted: " + layout.name() + " on " + path + " (braid plan --explain)";
  } catch (const Error& e) {
    note = std::string("no prediction: ") + e.what();
  }
  return profile.report(predicted, note);
}

}  // namespace braid::train
