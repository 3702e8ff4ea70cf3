#include "braid/train/anomaly.h"

#include <cmath>

#include "braid/core/error.h"
#include "braid/kernels/ops.h"

namespace braid::train {

namespace {

bool finite(const Tensor& t) {
  return !t.defined() || t.numel() == 0 || std::isfinite(kernels::max_abs(t));
}

}  // namespace

struct AnomalyDetector::State {
  int64_t micro_step = 0;
  std::string first;
  void found(const std::string& what, const char* pass) {
    first = what + " (" + pass + ", micro-step " + std::to_string(micro_step) + ")";
  }
};

AnomalyDetector::AnomalyDetector(nn::Transformer& model) : state_(std::make_shared<State>()) {
  std::weak_ptr<State> weak = state_;
  for (auto& [name, module] : model.named_modules()) {
    if (name.empty()) continue;  // the whole model: its output is the loss, checked anyway
    module->register_forward_post_hook(
        [weak, name = name](nn::Module&, const autograd::Variable& out) {
          auto s = weak.lock();
          if (!s || !s->first.empty()) return;
          if (!finite(out.value())) s->found("activation: output of '" + name + "'", "forward");
        });
  }
  for (auto& [name, slot] : model.named_parameter_slots()) {
    if (!slot->requires_grad || !slot->var.defined()) continue;
    slot->var.register_post_accumulate_hook(
        [weak, name = name](autograd::Variable& v) {
          auto s = weak.lock();
          if (!s || !s->first.empty()) return;
          if (!finite(v.grad())) s->found("gradient of '" + name + "'", "backward");
        },
        /*first=*/true);
  }
}

void AnomalyDetector::begin_step() {
  state_->first.clear();
  state_->micro_step = 0;
}

void AnomalyDetector::set_micro_step(int64_t micro_step) {
  state_->micro_step = micro_step;
}

std::string AnomalyDetector::first() const {
  return state_->first;
}

NanInjector::NanInjector(nn::Transformer& model) : armed_(std::make_shared<bool>(false)) {
  const char* name = model.config().is_gpt2() ? "transformer.wte" : "model.embed_tokens";
  nn::Module* embedding = model.find_module(name);
  BRAID_CHECK(embedding != nullptr, "NanInjector: the model has no module '", name, "'");
  embedding->register_forward_post_hook(
      [armed = armed_](nn::Module&, const autograd::Variable& out) {
        if (!*armed) return;
        *armed = false;
        Tensor first = out.value().flat_range(0, 1);
        first.fill_(std::nan(""));
      });
}

}  // namespace braid::train
