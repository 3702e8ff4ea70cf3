#include "braid/optim/loss_scaler.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <utility>

#include "braid/kernels/ops.h"

namespace braid::optim {
namespace {

// Shortest text that reads back to the same value: 65536, 5, 0.1, 4294967296.
std::string number(double v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

bool is_positive_finite(double v) {
  return v > 0 && std::isfinite(v);
}

}  // namespace

LossScaler::LossScaler(LossScalerConfig config) : config_(config) {
  const LossScalerConfig& c = config;
  BRAID_CHECK(c.loss_scale >= 0 && std::isfinite(c.loss_scale),
              "fp16 config: loss_scale = ", c.loss_scale,
              ", must be 0 (dynamic) or a positive finite static scale");
  // Below 1 the starting scale would only shrink gradients; above 2^126 its f32 inverse, which
  // unscale() multiplies by, is no longer a normal number.
  BRAID_CHECK(c.initial_scale_power >= 0 && c.initial_scale_power <= 126,
              "fp16 config: initial_scale_power = ", c.initial_scale_power,
              ", must be in [0, 126]");
  BRAID_CHECK(c.loss_scale_window >= 1, "fp16 config: loss_scale_window = ", c.loss_scale_window,
              ", must be >= 1");
  // DeepSpeed accepts hysteresis 0 and then never backs off: the countdown goes 0, -1, ...
  // without meeting 1.
  BRAID_CHECK(c.hysteresis >= 1, "fp16 config: hysteresis = ", c.hysteresis, ", must be >= 1");
  BRAID_CHECK(is_positive_finite(c.min_loss_scale),
              "fp16 config: min_loss_scale = ", c.min_loss_scale, ", must be positive and finite");
  const double initial = std::ldexp(1.0, c.initial_scale_power);
  // Else the first backoff, max(scale / 2, min), would raise the scale.
  BRAID_CHECK(c.loss_scale > 0 || c.min_loss_scale <= initial,
              "fp16 config: min_loss_scale = ", c.min_loss_scale,
              " is above the initial scale 2^initial_scale_power = ", number(initial));
  state_.is_dynamic = c.loss_scale == 0;
  state_.cur_scale = state_.is_dynamic ? initial : c.loss_scale;
  state_.cur_hysteresis = c.hysteresis;
}

bool LossScaler::unscale(std::vector<Tensor> grads,
                         const std::function<double(double)>& reduce_found_inf) {
  const float inv = static_cast<float>(1.0 / scale());
  bool found = false;
  for (Tensor& g : grads) {
    if (!g.defined() || g.numel() == 0) continue;
    kernels::scale(g, inv);
    // Checked after the division, so the verdict covers what the optimizer would read (a scale
    // below 1 can push a finite f32 gradient to inf). inf^2 = inf and nan propagates; finite f32
    // values cannot overflow an f64 sum of squares.
    if (!std::isfinite(kernels::sum_squares(g))) found = true;
  }
  double flag = found ? 1.0 : 0.0;
  if (reduce_found_inf) flag = reduce_found_inf(flag);
  return flag > 0.0;
}

// Note [DeepSpeed's update rules]
// DynamicLossScaler.update_scale, with delayed_shift = hysteresis, for one step:
//   overflow: if the hysteresis countdown is at 1, back off to max(scale / 2, min_loss_scale)
//             (an error when the scale is already at min_loss_scale), else count it down by one
//             and keep the scale; either way last_overflow_iter = cur_iter and the step is
//             skipped.
//   clean:    with consecutive_hysteresis, refill the countdown; then if
//             (cur_iter - last_overflow_iter) % loss_scale_window == 0, double the scale and
//             refill the countdown.
//   then cur_iter += 1.
// What follows from it, all reproduced on purpose:
//  - Growth counts from last_overflow_iter, not from the last change of scale: the iteration
//    of the overflow is 0, so the scale doubles at the window-th clean step after it, and again
//    every window steps (the modulo, not a reset). Before any overflow last_overflow_iter = -1,
//    so the first growth is at the window-th step too.
//  - An overflow that only counts the hysteresis down still moves last_overflow_iter, so it
//    restarts the growth window although the scale did not change.
//  - Without consecutive_hysteresis the countdown is refilled only by growth: two overflows any
//    number of clean steps apart (fewer than a window) back off on the second.
//  - With a window of 1 every clean step doubles, the one right after an overflow included
//    (DeepSpeed's FP16_Optimizer._update_scale, which has no hysteresis, waits one more step;
//    ZeRO uses this rule).
//  - The hysteresis test is DeepSpeed's `delayed_shift == 1 or cur_hysteresis == 1`; since the
//    countdown stays in 1..delayed_shift, the second half alone decides.
bool LossScaler::update(bool overflow) {
  State next = state_;
  std::string message;
  if (overflow) {
    next.last_overflow_iter = state_.cur_iter;
    if (!state_.is_dynamic) {
      message =
          "fp16 overflow: step skipped, static loss scale " + number(state_.cur_scale) + " kept";
    } else if (state_.cur_hysteresis == 1) {
      BRAID_CHECK(state_.cur_scale != config_.min_loss_scale, "fp16 overflow at iteration ",
                  state_.cur_iter, " with the loss scale already at min_loss_scale = ",
                  number(config_.min_loss_scale),
                  ": it cannot back off further (DeepSpeed stops the run here too)");
      next.cur_scale = std::max(state_.cur_scale / kScaleFactor, config_.min_loss_scale);
      message = "fp16 overflow: step skipped, loss scale " + number(state_.cur_scale) + " -> " +
                number(next.cur_scale);
    } else {
      next.cur_hysteresis = state_.cur_hysteresis - 1;
      message = "fp16 overflow: step skipped, loss scale " + number(state_.cur_scale) +
                " kept, hysteresis " + std::to_string(state_.cur_hysteresis) + " -> " +
                std::to_string(next.cur_hysteresis);
    }
  } else if (state_.is_dynamic) {
    if (config_.consecutive_hysteresis) next.cur_hysteresis = config_.hysteresis;
    if ((state_.cur_iter - state_.last_overflow_iter) % config_.loss_scale_window == 0) {
      next.cur_hysteresis = config_.hysteresis;
      next.cur_scale = state_.cur_scale * kScaleFactor;
    }
  }
  next.cur_iter = state_.cur_iter + 1;
  state_ = next;
  overflow_message_ = std::move(message);
  return !overflow;
}

void LossScaler::set_state(const State& s) {
  BRAID_CHECK(s.is_dynamic == is_dynamic(), "loss scaler state: saved with ",
              s.is_dynamic ? "dynamic" : "static",
              " scaling, but fp16 config loss_scale = ", config_.loss_scale, " asks for ",
              is_dynamic() ? "dynamic" : "static");
  BRAID_CHECK(is_positive_finite(s.cur_scale), "loss scaler state: cur_scale = ", s.cur_scale,
              ", must be positive and finite");
  BRAID_CHECK(is_dynamic() || s.cur_scale == config_.loss_scale,
              "loss scaler state: static cur_scale = ", number(s.cur_scale),
              ", but fp16 config loss_scale = ", number(config_.loss_scale));
  BRAID_CHECK(!is_dynamic() || s.cur_scale >= config_.min_loss_scale,
              "loss scaler state: cur_scale = ", number(s.cur_scale),
              " is below fp16 config min_loss_scale = ", number(config_.min_loss_scale));
  BRAID_CHECK(s.cur_iter >= 0, "loss scaler state: cur_iter = ", s.cur_iter, ", must be >= 0");
  BRAID_CHECK(s.last_overflow_iter >= -1 && s.last_overflow_iter < s.cur_iter,
              "loss scaler state: last_overflow_iter = ", s.last_overflow_iter,
              ", must be in [-1, cur_iter = ", s.cur_iter, ")");
  BRAID_CHECK(s.cur_hysteresis >= 1 && s.cur_hysteresis <= config_.hysteresis,
              "loss scaler state: cur_hysteresis = ", s.cur_hysteresis,
              ", must be in [1, fp16 config hysteresis = ", config_.hysteresis, "]");
  state_ = s;
  overflow_message_.clear();
}

}  // namespace braid::optim
