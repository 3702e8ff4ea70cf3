// StepProfile: where a training step's time goes (`braid train --profile`, output.profile),
// measured, beside what the step-time model predicts for the same layout on this machine's
// profile (parallel/cost/step_cost.h, made by `braid plan --calibrate`).
//
// Note [Step profile]: after the warm-up steps (the first two, which allocate and fault pages
// in), op profiling is on (kernels/op_profile.h) and each kernel's host time counts in one part:
//   gemm          matmul, linear_forward, linear_backward (the blocks' products)
//   attention     attention_forward, attention_backward
//   memory-bound  norms, activations, RoPE, adds and their gradients (axpy), bias adds,
//                 embedding, column copies, casts
//   loss          the fused LM head + cross-entropy (lm_head_ce_*)
//   optimizer     the optimizer's kernels and the gradient norm
// then, from the step's own numbers, exposed communication (ParallelStats::exposed_comm_ms),
// the pipeline's bubble (its idle fraction of the step) and "other": the step's wall time
// less all of the above (autograd, allocation, framework, waits the parts do not name).
// Totals are per process; ranks as threads of one process (tests) would add up, so the
// trainer profiles only with one rank per process.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "braid/config/config.h"
#include "braid/nn/model_config.h"
#include "braid/parallel/cost/step_cost.h"

namespace braid::train {

class StepProfile {
 public:
  explicit StepProfile(bool enabled, int warmup_steps = 2);
  ~StepProfile();
  StepProfile(const StepProfile&) = delete;
  StepProfile& operator=(const StepProfile&) = delete;

  bool enabled() const { return enabled_; }
  // Around each step of the run (index counts from 0 in this run).
  void begin_step(int64_t index);
  void end_step(double seconds, double exposed_comm_ms, double bubble);

  // Milliseconds per profiled step by part (Note [Step profile]), "step" their total.
  std::map<std::string, double> measured_ms() const;
  int64_t profiled_steps() const { return steps_; }
  // The table: each part measured, and predicted when `predicted` is given (else a line saying
  // how to get predictions).
  std::string report(const std::optional<parallel::cost::StepCost>& predicted,
                     const std::string& prediction_note) const;

 private:
  bool enabled_;
  int warmup_;
  bool started_ = false, on_ = false;
  int64_t steps_ = 0;
  double step_s_ = 0, comm_s_ = 0, bubble_s_ = 0;
};

// The report for a run of cfg on `world` ranks, with the prediction for its layout from the
// machine profile (default_profile_path()) when there is one and it models the layout.
std::string step_profile_report(const StepProfile& profile, const config::TrainConfig& cfg,
                                const nn::ModelConfig& model, int world);

// The part of Note [Step profile] a kernel op counts in ("" for one that counts in none).
std::string profile_part(const std::string& op);

}  // namespace braid::train
