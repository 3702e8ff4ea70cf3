// The Accelerator's one step path (Note [One step path], accelerator.h): train_step and the
// finish every step shares with a user's own loop (step()), and the runtime's forwards without
// recording.
#include <cmath>

#include "braid/comm/gather_strings.h"
#include "braid/core/error.h"
#include "braid/kernels/ops.h"
#include "braid/optim/clip_grad.h"
#include "braid/train/accelerator.h"

namespace braid::train {

Accelerator::StepResult Accelerator::train_step(nn::StagedModel& model,
                                                parallel::MicroBatches batches, int64_t step,
                                                const StepHooks& hooks) {
  BRAID_CHECK(model_ == &model, "Accelerator: train_step() on a model prepare() has not seen");
  BRAID_CHECK(!in_micro_step_ && micro_ == 0,
              "Accelerator: train_step() inside an accumulate() loop's optimizer step");
  MemoryScope scope(tracker_);
  StepResult r;
  r.lr = schedule_.lr_at(step);
  parallelism_->zero_grad();
  grad_norm_ = -1;
  batches.loss_scale = static_cast<float>(loss_scale());
  const parallel::StepLoss loss = parallelism_->forward_backward(model, batches);
  r.loss = loss.sum;
  r.finite = loss.finite;
  // The norm where something needs it: clipping, the fp16 scaler's overflow verdict, or the
  // non-finite check (Note [Non-finite steps]); off and unclipped, a step costs nothing extra.
  const double clip = cfg_.optimizer.grad_clip;
  if (clip > 0 || scaler_ || cfg_.training.on_nonfinite != "off")
    grad_norm_ = parallelism_->clip_grad_norm(clip, loss_scale());
  finish_step(step, r, hooks);
  return r;
}

// Note [Non-finite steps]: the verdict on a step is its global gradient norm, which every rank
// computes to the same bits (Note [Global norm]), so every rank takes the same branch with no
// extra collective. It is computed when clipping, when fp16 scales the loss (the norm unscales
// in the same pass, Note [Unscale with the clip]) and unless training.on_nonfinite is off; off
// and unclipped, a step costs nothing extra and nothing is checked. Not finite:
// - fp16 with loss scaling: an overflow; the scaler skips the step and backs off (DeepSpeed's
//   rules, optim/loss_scaler.h), and at min_loss_scale the run stops with its error;
// - otherwise on_nonfinite says: stop (every rank throws the same one line) or skip (no update,
//   counted, reported).
// Either way the line names the step, the first rank whose own values went non-finite and what
// (locate_nonfinite): the anomaly detector's first tensor, else a non-finite loss, else the first
// parameter whose reduced gradient is non-finite. Finding it costs only on that path.
void Accelerator::finish_step(int64_t step, StepResult& r, const StepHooks& hooks) {
  r.grad_norm = grad_norm_;
  const bool finite = grad_norm_ < 0 || optim::is_finite_norm(grad_norm_);
  const std::string n = std::to_string(step + 1);
  if (!finite) {
    const std::string mine = hooks.first_nonfinite ? hooks.first_nonfinite() : "";
    const std::string where = locate_nonfinite(mine, r.finite, grad_norm_);
    if (scaler_) {
      scaler_->update(true);  // throws at min_loss_scale
      ++skipped_steps_;
      r.skipped = "step " + n + ": " + scaler_->overflow_message() + " (" + where + ")";
      return;
    }
    BRAID_CHECK(cfg_.training.on_nonfinite == "skip", "step ", n, ": inf/nan in training: ", where,
                ". Lower optimizer.lr, raise schedule.warmup_steps or set optimizer.grad_clip; "
                "training.detect_anomaly: true names the first tensor, training.on_nonfinite: "
                "skip skips such steps");
    ++skipped_steps_;
    r.skipped = "step " + n + ": inf/nan, step skipped (training.on_nonfinite: skip, " +
                std::to_string(skipped_steps_) + " so far): " + where;
    return;
  }
  if (scaler_ && !scaler_->update(false)) return;
  if (hooks.before_update) hooks.before_update();
  optimizer().step(static_cast<float>(r.lr));
  parallelism_->after_optimizer_step();
  r.updated = true;
}

std::string Accelerator::locate_nonfinite(const std::string& own, bool local_loss_finite,
                                          double gnorm) {
  // What this rank saw of its own (1: its own values) or only after the reductions (2).
  std::string mine = own;
  if (mine.empty() && !local_loss_finite) mine = "loss";
  if (!mine.empty()) {
    mine = "1" + mine;
  } else {
    for (const optim::ParamSlice& s : parallelism_->optimizer_slices()) {
      if (!s.grad.defined() || s.grad.numel() == 0) continue;
      if (!std::isfinite(kernels::max_abs(s.grad))) {
        mine = "2reduced gradient of '" + s.name() + "'";
        break;
      }
    }
  }
  const std::vector<std::string> all = comm::all_gather_strings(world_.get(), mine);
  for (const char level : {'1', '2'}) {
    std::string line, others;
    for (size_t r = 0; r < all.size(); ++r) {
      if (all[r].empty() || all[r][0] != level) continue;
      if (line.empty())
        line = "first on rank " + std::to_string(r) + ": " + all[r].substr(1);
      else
        others += (others.empty() ? "" : ", ") + std::to_string(r);
    }
    if (line.empty()) continue;
    if (!others.empty()) line += "; also on rank(s) " + others;
    return line;
  }
  return "gradient norm " + std::to_string(gnorm);
}

double Accelerator::eval_loss(nn::StagedModel& model, const Tensor& ids, const Tensor& targets,
                              const Tensor& positions) {
  MemoryScope scope(tracker_);
  return parallelism_->eval_loss(model, ids, targets, positions);
}

Tensor Accelerator::last_logits(nn::Transformer& model, const Tensor& ids) {
  MemoryScope scope(tracker_);
  return parallelism_->last_logits(model, ids);
}

void Accelerator::for_each_full_unit(const parallel::Parallelism::UnitVisitor& fn) {
  MemoryScope scope(tracker_);
  parallelism_->for_each_full_unit(fn);
}

}  // namespace braid::train
