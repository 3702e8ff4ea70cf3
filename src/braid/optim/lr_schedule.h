// Learning-rate schedules as pure functions of the step (the number of optimizer steps taken
// before this one, starting at 0), as HuggingFace's LambdaLR schedules:
//   warmup:  lr * step / max(1, warmup_steps)                      for step < warmup_steps
//            (log_warmup: lr * ln(step + 1) / ln(warmup_steps), DeepSpeed's WarmupLR default)
//   then, with progress = (step - warmup) / max(1, total - warmup) clamped to [0, 1]:
//   constant: lr
//   linear:   lr * (r + (1 - r) * (1 - progress))
//   cosine:   lr * (r + (1 - r) * 0.5 * (1 + cos(pi * progress)))
// where r = min_lr / lr. With min_lr = 0 these are exactly get_constant_schedule_with_warmup,
// get_linear_schedule_with_warmup and get_cosine_schedule_with_warmup; with min_lr > 0 cosine
// is get_cosine_with_min_lr_schedule_with_warmup (min_lr_rate = r) and linear floors the same
// way. Past total_steps the rate stays at min_lr (HF's cosine would rise again).
#pragma once

#include <cstdint>
#include <string>

namespace braid::optim {

enum class LrDecay { constant, linear, cosine };
LrDecay lr_decay_from_name(const std::string& name);  // "constant", "linear", "cosine"
const char* lr_decay_name(LrDecay d);

struct LrSchedule {
  LrDecay decay = LrDecay::constant;
  double lr = 1e-3;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;  // needed by linear and cosine
  double min_lr = 0.0;
  // Warmup lr x ln(step + 1) / ln(warmup_steps) instead of linear (DeepSpeed's warmup_type log).
  bool log_warmup = false;

  void validate() const;  // throws naming the field and the numbers
  double lr_at(int64_t step) const;
};

}  // namespace braid::optim
