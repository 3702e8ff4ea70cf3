#include "braid/optim/optimizer.h"

#include "braid/kernels/ops.h"

namespace braid::optim {
namespace {

void check_slice(const char* opt, const ParamSlice& s) {
  BRAID_CHECK(s.param.defined(), opt, ": parameter '", s.name(), "' is undefined");
  BRAID_CHECK(s.param.dtype() == DType::f32, opt, ": parameter '", s.name(),
              "' must be f32 (master weights), got ", dtype_name(s.param.dtype()));
  BRAID_CHECK(s.shard.numel == s.param.numel(), opt, ": parameter '", s.name(), "' holds ",
              s.param.numel(), " elements but its shard record says ", s.shard.numel);
  BRAID_CHECK(!s.grad.defined() || s.grad.numel() == s.param.numel(), opt, ": parameter '",
              s.name(), "' has ", s.param.numel(), " elements but its gradient ", s.grad.numel());
}

std::vector<std::vector<Tensor>> zeros_like_params(const std::vector<ParamGroup>& groups) {
  std::vector<std::vector<Tensor>> out(groups.size());
  for (size_t g = 0; g < groups.size(); ++g)
    for (const ParamSlice& s : groups[g].params) {
      Tensor t = Tensor::empty(s.param.shape(), DType::f32, MemCategory::optimizer_state);
      t.zero_();
      out[g].push_back(t);
    }
  return out;
}

}  // namespace

ParamSlice ParamSlice::whole(std::string name, Tensor param, Tensor grad) {
  ShardRecord r{std::move(name), param.shape(), 0, param.numel(), param.dtype()};
  return {std::move(r), std::move(param), std::move(grad)};
}

Optimizer::Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {}

AdamW::AdamW(std::vector<ParamGroup> groups, float beta1, float beta2, float eps)
    : Optimizer(std::move(groups)), beta1_(beta1), beta2_(beta2), eps_(eps) {
  BRAID_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1,
              "adamw: betas must be in "
              "[0, 1), got beta1 ",
              beta1, ", beta2 ", beta2);
  BRAID_CHECK(eps >= 0, "adamw: eps must be >= 0, got ", eps);
  for (const auto& g : groups_)
    for (const auto& s : g.params) check_slice("adamw", s);
  exp_avg_ = zeros_like_params(groups_);
  exp_avg_sq_ = zeros_like_params(groups_);
}

void AdamW::step(float lr) {
  ++step_count_;
  for (size_t g = 0; g < groups_.size(); ++g) {
    ParamGroup& group = groups_[g];
    for (size_t i = 0; i < group.params.size(); ++i) {
      ParamSlice& s = group.params[i];
      if (!s.grad.defined()) continue;
      kernels::adamw_step(s.param, s.grad, exp_avg_[g][i], exp_avg_sq_[g][i], lr * group.lr_scale,
                          beta1_, beta2_, eps_, group.weight_decay, step_count_);
    }
  }
}

std::vector<std::pair<std::string, Tensor>> AdamW::state_tensors() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const std::string& n = groups_[g].params[i].name();
      out.emplace_back(n + ".exp_avg", exp_avg_[g][i]);
      out.emplace_back(n + ".exp_avg_sq", exp_avg_sq_[g][i]);
    }
  return out;
}

SGD::SGD(std::vector<ParamGroup> groups, float momentum, bool nesterov)
    : Optimizer(std::move(groups)), momentum_(momentum), nesterov_(nesterov) {
  BRAID_CHECK(momentum >= 0, "sgd: momentum must be >= 0, got ", momentum);
  BRAID_CHECK(!nesterov || momentum > 0, "sgd: nesterov needs momentum > 0");
  for (const auto& g : groups_)
    for (const auto& s : g.params) check_slice("sgd", s);
  if (momentum_ > 0) momentum_buffer_ = zeros_like_params(groups_);
}

void SGD::step(float lr) {
  // Note [SGD first step]: torch initialises the momentum buffer to the first gradient; a
  // restored optimizer (step_count > 0) continues from its saved buffer instead.
  bool first_step = step_count_ == 0;
  ++step_count_;
  for (size_t g = 0; g < groups_.size(); ++g) {
    ParamGroup& group = groups_[g];
    for (size_t i = 0; i < group.params.size(); ++i) {
      ParamSlice& s = group.params[i];
      if (!s.grad.defined()) continue;
      Tensor none;
      Tensor& buf = momentum_ > 0 ? momentum_buffer_[g][i] : none;
      kernels::sgd_step(s.param, s.grad, buf, lr * group.lr_scale, momentum_, group.weight_decay,
                        nesterov_, first_step);
    }
  }
}

std::vector<std::pair<std::string, Tensor>> SGD::state_tensors() {
  std::vector<std::pair<std::string, Tensor>> out;
  if (momentum_ == 0) return out;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i)
      out.emplace_back(groups_[g].params[i].name() + ".momentum_buffer", momentum_buffer_[g][i]);
  return out;
}

}  // namespace braid::optim
