#include "braid/nn/mlp.h"

#include "braid/autograd/functions.h"

namespace braid::nn {

MLP::MLP(const ModelConfig& cfg, float out_std, TensorParallel* tp)
    : is_gpt2_(cfg.is_gpt2()), tp_(tp) {
  const int64_t C = cfg.d_model, H = cfg.d_ff;
  const LinearSplit column = tp ? LinearSplit::column(tp) : LinearSplit{};
  const LinearSplit row = tp ? LinearSplit::row(tp) : LinearSplit{};
  if (is_gpt2_) {
    c_fc_ = register_module("c_fc", std::make_unique<Linear>(C, H, true, 0.02f, column));
    out_proj_ = register_module("c_proj", std::make_unique<Linear>(H, C, true, out_std, row));
  } else {
    gate_proj_ = register_module("gate_proj", std::make_unique<Linear>(C, H, false, 0.02f, column));
    up_proj_ = register_module("up_proj", std::make_unique<Linear>(C, H, false, 0.02f, column));
    out_proj_ = register_module("down_proj", std::make_unique<Linear>(H, C, false, out_std, row));
  }
}

Variable MLP::forward(const Variable& input) {
  const Variable x = tp_ ? tp_->enter(input) : input;
  if (is_gpt2_) return (*out_proj_)(autograd::gelu((*c_fc_)(x)));
  return (*out_proj_)(autograd::swiglu((*gate_proj_)(x), (*up_proj_)(x)));
}

}  // namespace braid::nn
