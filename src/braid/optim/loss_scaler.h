// LossScaler: fp16 loss scaling with DeepSpeed's rules. The loss is multiplied by scale() before
// backward; unscale() divides the gradients by it and says whether any rank found inf/nan;
// update() then decides whether the optimizer step runs and moves the scale.
//
// Dynamic scaling follows DynamicLossScaler.update_scale in deepspeed/runtime/fp16/loss_scaler.py
// (the scaler ZeRO and the unfused fp16 optimizer use), Note [DeepSpeed's update rules]. A static
// scale never moves, and a step with an overflow is still skipped, as in DeepSpeed (ZeRO and
// FP16_Optimizer check for overflow and skip whatever the scaler).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "braid/core/tensor.h"

namespace braid::optim {

// DeepSpeed's "fp16" block: the same keys, the same defaults. The scale factor is 2, as in
// DeepSpeed, whose fp16 block has no key for it (LossScaler::kScaleFactor).
struct LossScalerConfig {
  double loss_scale = 0;                // 0: dynamic; > 0: this static scale
  int initial_scale_power = 16;         // dynamic scale starts at 2^initial_scale_power
  int64_t loss_scale_window = 1000;     // grow every this many iterations since the last overflow
  int hysteresis = 2;                   // overflows it takes to back off (delayed_shift)
  bool consecutive_hysteresis = false;  // refill the hysteresis on every clean step
  double min_loss_scale = 1;            // backoff floor; an overflow at the floor is an error
};

class LossScaler {
 public:
  static constexpr double kScaleFactor = 2.0;

  // Throws braid::Error naming the first bad key and its value.
  explicit LossScaler(LossScalerConfig config = {});

  bool is_dynamic() const { return config_.loss_scale == 0; }
  double scale() const { return state_.cur_scale; }

  // Divides every gradient by scale() and returns whether any is inf/nan on any rank: the
  // reducer maps this rank's flag (1.0 if it found one, else 0.0) to the sum over ranks.
  bool unscale(std::vector<Tensor> grads,
               const std::function<double(double)>& reduce_found_inf = {});

  // Once per optimizer step, with the agreed overflow verdict. Returns whether the step is taken
  // (!overflow, static or dynamic). Throws braid::Error, changing nothing, on an overflow that
  // must back off a scale already at min_loss_scale (DeepSpeed stops the run there too).
  bool update(bool overflow);

  // One line for the training log about the last update(); empty when it had no overflow.
  // "fp16 overflow: step skipped, loss scale 65536 -> 32768".
  const std::string& overflow_message() const { return overflow_message_; }

  // Everything update() reads, so that set_state(state()) resumes bit for bit.
  struct State {
    double cur_scale = 0;
    int64_t cur_iter = 0;             // update() calls so far
    int64_t last_overflow_iter = -1;  // cur_iter of the last overflow; -1 before any
    int cur_hysteresis = 0;           // overflows left before a backoff, 1..hysteresis
    bool is_dynamic = true;
    bool operator==(const State&) const = default;
  };
  const State& state() const { return state_; }
  // Throws braid::Error if s is not a state this config can reach (a static state for a dynamic
  // config, cur_hysteresis outside 1..hysteresis, a scale below min_loss_scale, ...).
  void set_state(const State& s);

 private:
  LossScalerConfig config_;
  State state_;
  std::string overflow_message_;
};

}  // namespace braid::optim
