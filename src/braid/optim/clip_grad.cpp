#include "braid/optim/clip_grad.h"

#include <cmath>

#include "braid/kernels/ops.h"

namespace braid::optim {

int exact_norm_shift(float max_abs) {
  if (!(max_abs > 0)) return 0;
  int e = 0;
  std::frexp(max_abs, &e);  // max_abs < 2^e
  return 55 - 2 * e;
}

double grad_norm(float local_max, const std::function<__int128(int shift)>& local_sum,
                 const NormReduction& reduce) {
  float max = reduce.max ? reduce.max(local_max) : local_max;
  if (!std::isfinite(max)) return INFINITY;
  // Every rank sees the same global max, so all take the same branch (and the same collectives).
  if (max == 0.0f) return 0.0;
  const int shift = exact_norm_shift(max);
  __int128 sum = local_sum(shift);
  if (reduce.sum) sum = reduce.sum(sum);
  return std::sqrt(std::ldexp(static_cast<double>(sum), -shift));
}

double grad_norm(const std::vector<Tensor>& grads, const NormReduction& reduce) {
  const float max = kernels::max_abs(grads);  // one reduction over the list (one GPU round trip)
  auto local_sum = [&grads](int shift) { return kernels::sum_squares_fixed(grads, shift); };
  return grad_norm(max, local_sum, reduce);
}

float clip_coefficient(double norm, double max_norm) {
  const double coef = max_norm / (norm + 1e-6);
  return coef < 1.0 ? static_cast<float>(coef) : 1.0f;
}

bool is_finite_norm(double norm) {
  return std::isfinite(norm);
}

float unscale_clip_factor(double scaled_norm, double max_norm, double loss_scale) {
  const double norm = scaled_norm / loss_scale;
  const double clip = max_norm > 0 ? clip_coefficient(norm, max_norm) : 1.0;
  return static_cast<float>(clip / loss_scale);
}

namespace {
// Applies the clip (Note [Unscale with the clip]) for a scaled norm; returns the unscaled norm.
// A non-finite norm leaves the gradients untouched.
double scale_by_clip(std::vector<Tensor>& grads, double scaled, double max_norm,
                     double loss_scale) {
  if (!is_finite_norm(scaled)) return scaled;
  // Note [Unscale with the clip]
  const float factor = unscale_clip_factor(scaled, max_norm, loss_scale);
  if (factor != 1.0f) kernels::scale(grads, factor);  // one launch on a GPU
  return scaled / loss_scale;
}
}  // namespace

double clip_grad_norm(std::vector<Tensor> grads, double max_norm, const NormReduction& reduce,
                      bool error_if_nonfinite, double loss_scale) {
  BRAID_CHECK(max_norm >= 0, "clip_grad_norm: max_norm must be >= 0, got ", max_norm);
  BRAID_CHECK(loss_scale > 0, "clip_grad_norm: loss_scale must be > 0, got ", loss_scale);
  const double scaled = grad_norm(grads, reduce);
  BRAID_CHECK(is_finite_norm(scaled) || !error_if_nonfinite,
              "clip_grad_norm: the total gradient norm is ", scaled, " over ", grads.size(),
              " gradient tensors (inf or nan gradients); the step "
              "must be skipped");
  return scale_by_clip(grads, scaled, max_norm, loss_scale);
}

double clip_grad_norm(std::vector<Tensor> grads, const std::vector<Tensor>& counted,
                      double max_norm, const NormReduction& reduce, double loss_scale) {
  BRAID_CHECK(max_norm >= 0, "clip_grad_norm: max_norm must be >= 0, got ", max_norm);
  BRAID_CHECK(loss_scale > 0, "clip_grad_norm: loss_scale must be > 0, got ", loss_scale);
  return scale_by_clip(grads, grad_norm(counted, reduce), max_norm, loss_scale);
}

}  // namespace braid::optim
