#include "braid/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "braid/core/error.h"

namespace braid::optim {

LrDecay lr_decay_from_name(const std::string& name) {
  if (name == "constant") return LrDecay::constant;
  if (name == "linear") return LrDecay::linear;
  if (name == "cosine") return LrDecay::cosine;
  BRAID_THROW("unknown lr schedule '", name, "' (expected constant, linear or cosine)");
}

const char* lr_decay_name(LrDecay d) {
  switch (d) {
    case LrDecay::constant:
      return "constant";
    case LrDecay::linear:
      return "linear";
    case LrDecay::cosine:
      return "cosine";
  }
  return "?";
}

void LrSchedule::validate() const {
  BRAID_CHECK(lr >= 0, "lr schedule: lr must be >= 0, got ", lr);
  BRAID_CHECK(min_lr >= 0 && min_lr <= lr, "lr schedule: min_lr must be in [0, lr = ", lr,
              "], got ", min_lr);
  BRAID_CHECK(warmup_steps >= 0, "lr schedule: warmup_steps must be >= 0, got ", warmup_steps);
  if (decay != LrDecay::constant)
    BRAID_CHECK(total_steps >= warmup_steps, "lr schedule (", lr_decay_name(decay),
                "): total_steps (", total_steps, ") must be >= warmup_steps (", warmup_steps, ")");
}

double LrSchedule::lr_at(int64_t step) const {
  BRAID_CHECK(step >= 0, "lr schedule: negative step ", step);
  if (step < warmup_steps && log_warmup && warmup_steps > 1)
    return lr * std::log(static_cast<double>(step + 1)) /
           std::log(static_cast<double>(warmup_steps));
  if (step < warmup_steps)
    return lr * static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup_steps));
  if (decay == LrDecay::constant) return lr;
  double progress = static_cast<double>(step - warmup_steps) /
                    static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
  progress = std::clamp(progress, 0.0, 1.0);
  double factor = decay == LrDecay::linear ? 1.0 - progress
                                           : 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  double r = lr > 0 ? min_lr / lr : 0.0;
  return lr * (r + (1.0 - r) * factor);
}

}  // namespace braid::optim
