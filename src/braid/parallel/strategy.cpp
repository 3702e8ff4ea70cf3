#include "braid/parallel/strategy.h"

#include <cmath>

#include "braid/autograd/variable.h"
#include "braid/core/error.h"

namespace braid::parallel {

StepLoss Strategy::forward_backward(nn::Transformer& model, const MicroBatches& batches) {
  StepLoss out;
  for (int64_t m = 0; m < batches.count; ++m) {
    auto [ids, targets] = batches.next(m);
    begin_micro_step(m, batches.count);
    if (batches.at) batches.at(m, "forward");
    autograd::Variable loss = model.loss(ids, targets, batches.denominator);
    const double l = loss.value().item();
    out.sum += l;
    out.finite = out.finite && std::isfinite(l);
    if (batches.at) batches.at(m, "backward");
    loss.backward(batches.loss_scale);
    end_micro_step();
  }
  return out;
}

double Strategy::eval_loss(nn::Transformer& model, const Tensor& ids, const Tensor& targets) {
  autograd::NoGradGuard no_grad;
  return model.loss(ids, targets, 1.0).value().item();
}

Tensor Strategy::last_logits(nn::Transformer& model, const Tensor& ids) {
  return model.last_logits(ids);
}

nn::Transformer& transformer_for(nn::Model& model, const char* what) {
  auto* t = dynamic_cast<nn::Transformer*>(&model);
  BRAID_CHECK(t != nullptr, what,
              " splits a Transformer's blocks and heads; this model is not one (use data "
              "parallelism: ddp, zero1-3 or fsdp)");
  return *t;
}

std::vector<int> all_units(const nn::ParamLayout& layout) {
  std::vector<int> units(layout.units().size());
  for (size_t u = 0; u < units.size(); ++u) units[u] = static_cast<int>(u);
  return units;
}

}  // namespace braid::parallel
