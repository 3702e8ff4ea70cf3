// Dynamic loss scaling for f16 training, as torch.cuda.amp.GradScaler: the loss is multiplied
// by scale() before backward; unscale() divides the gradients by it and reports inf/nan; a
// step with inf/nan is skipped and the scale backs off; after growth_interval clean steps in
// a row the scale grows.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "braid/core/tensor.h"

namespace braid::optim {

struct LossScalerConfig {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  double min_scale = 0.0;  // floor for backoff (DeepSpeed's min_loss_scale); 0 = none
};

class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(LossScalerConfig config = {});

  double scale() const { return scale_; }

  // Divides every gradient by scale() and returns whether any is inf/nan. The reducer (sum
  // over ranks of 1.0 per rank that found one) makes every rank agree on the verdict.
  bool unscale(std::vector<Tensor> grads,
               const std::function<double(double)>& reduce_found_inf = {});

  // After the step decision: found_inf -> skip the step, back off, reset the growth count;
  // else count a clean step and grow after growth_interval of them. Returns whether the
  // optimizer step should be taken (!found_inf).
  bool update(bool found_inf);

  struct State {
    double scale = 0;
    int64_t growth_tracker = 0;  // clean steps since the last change of scale
  };
  State state() const { return {scale_, growth_tracker_}; }
  void set_state(const State& s);

 private:
  LossScalerConfig config_;
  double scale_;
  int64_t growth_tracker_ = 0;
};

}  // namespace braid::optim
