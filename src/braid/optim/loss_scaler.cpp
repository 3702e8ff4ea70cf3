#include "braid/optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "braid/kernels/ops.h"

namespace braid::optim {

DynamicLossScaler::DynamicLossScaler(LossScalerConfig config)
    : config_(config), scale_(config.init_scale) {
  BRAID_CHECK(config.init_scale > 0, "loss scaler: init_scale must be > 0, got ",
              config.init_scale);
  BRAID_CHECK(config.growth_factor > 1, "loss scaler: growth_factor must be > 1, got ",
              config.growth_factor);
  BRAID_CHECK(config.backoff_factor > 0 && config.backoff_factor < 1,
              "loss scaler: backoff_factor must be in (0, 1), got ", config.backoff_factor);
  BRAID_CHECK(config.growth_interval > 0, "loss scaler: growth_interval must be > 0, got ",
              config.growth_interval);
}

bool DynamicLossScaler::unscale(std::vector<Tensor> grads,
                                const std::function<double(double)>& reduce_found_inf) {
  const float inv = static_cast<float>(1.0 / scale_);
  bool found = false;
  for (Tensor& g : grads) {
    if (!g.defined() || g.numel() == 0) continue;
    kernels::scale(g, inv);
    // inf^2 = inf and nan propagates; finite f32 values cannot overflow an f64 sum of squares.
    if (!std::isfinite(kernels::sum_squares(g))) found = true;
  }
  double flag = found ? 1.0 : 0.0;
  if (reduce_found_inf) flag = reduce_found_inf(flag);
  return flag > 0.0;
}

bool DynamicLossScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ = std::max(scale_ * config_.backoff_factor, config_.min_scale);
    growth_tracker_ = 0;
    return false;
  }
  if (++growth_tracker_ == config_.growth_interval) {
    scale_ *= config_.growth_factor;
    growth_tracker_ = 0;
  }
  return true;
}

void DynamicLossScaler::set_state(const State& s) {
  BRAID_CHECK(s.scale > 0 && std::isfinite(s.scale), "loss scaler: restored scale ", s.scale,
              " is not a positive finite number");
  BRAID_CHECK(s.growth_tracker >= 0, "loss scaler: restored growth_tracker ", s.growth_tracker,
              " is negative");
  scale_ = s.scale;
  growth_tracker_ = s.growth_tracker;
}

}  // namespace braid::optim
