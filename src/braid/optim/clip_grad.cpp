#include "braid/optim/clip_grad.h"

#include <cmath>

#include "braid/kernels/ops.h"

namespace braid::optim {

double grad_norm(const std::vector<Tensor>& grads,
                 const std::function<double(double)>& reduce_sum_squares) {
  double sum_sq = 0.0;
  for (const Tensor& g : grads)
    if (g.defined() && g.numel() > 0) sum_sq += kernels::sum_squares(g);
  if (reduce_sum_squares) sum_sq = reduce_sum_squares(sum_sq);
  return std::sqrt(sum_sq);
}

bool is_finite_norm(double norm) {
  return std::isfinite(norm);
}

double clip_grad_norm(std::vector<Tensor> grads, double max_norm,
                      const std::function<double(double)>& reduce_sum_squares,
                      bool error_if_nonfinite) {
  BRAID_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  double norm = grad_norm(grads, reduce_sum_squares);
  if (!is_finite_norm(norm)) {
    BRAID_CHECK(!error_if_nonfinite, "clip_grad_norm: the total gradient norm is ", norm, " over ",
                grads.size(),
                " gradient tensors (inf or nan gradients); the step "
                "must be skipped");
    return norm;
  }
  double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0)
    for (Tensor& g : grads)
      if (g.defined() && g.numel() > 0) kernels::scale(g, static_cast<float>(coef));
  return norm;
}

}  // namespace braid::optim
