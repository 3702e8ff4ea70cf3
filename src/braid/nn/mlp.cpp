#include "braid/nn/mlp.h"

#include "braid/autograd/functions.h"

namespace braid::nn {

MLP::MLP(const ModelConfig& cfg, float out_std) : is_gpt2_(cfg.is_gpt2()) {
  const int64_t C = cfg.d_model, H = cfg.d_ff;
  if (is_gpt2_) {
    c_fc_ = register_module("c_fc", std::make_unique<Linear>(C, H, true));
    out_proj_ = register_module("c_proj", std::make_unique<Linear>(H, C, true, out_std));
  } else {
    gate_proj_ = register_module("gate_proj", std::make_unique<Linear>(C, H, false));
    up_proj_ = register_module("up_proj", std::make_unique<Linear>(C, H, false));
    out_proj_ = register_module("down_proj", std::make_unique<Linear>(H, C, false, out_std));
  }
}

Variable MLP::forward(const Variable& x) {
  if (is_gpt2_) return (*out_proj_)(autograd::gelu((*c_fc_)(x)));
  return (*out_proj_)(autograd::swiglu((*gate_proj_)(x), (*up_proj_)(x)));
}

}  // namespace braid::nn
