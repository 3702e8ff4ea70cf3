#include "braid/nn/attention.h"

#include "braid/autograd/functions.h"

namespace braid::nn {

Attention::Attention(const ModelConfig& cfg, float out_std)
    : is_gpt2_(cfg.is_gpt2()),
      n_head_(cfg.n_head),
      n_kv_head_(cfg.n_kv_head),
      head_size_(cfg.head_size()),
      rope_theta_(static_cast<float>(cfg.rope_theta)) {
  const int64_t C = cfg.d_model;
  if (is_gpt2_) {
    c_attn_ = register_module("c_attn", std::make_unique<Linear>(C, 3 * C, true));
    out_proj_ = register_module("c_proj", std::make_unique<Linear>(C, C, true, out_std));
  } else {
    const int64_t kv = n_kv_head_ * head_size_;
    q_proj_ = register_module("q_proj", std::make_unique<Linear>(C, C, false));
    k_proj_ = register_module("k_proj", std::make_unique<Linear>(C, kv, false));
    v_proj_ = register_module("v_proj", std::make_unique<Linear>(C, kv, false));
    out_proj_ = register_module("o_proj", std::make_unique<Linear>(C, C, false, out_std));
  }
}

Variable Attention::forward(const Variable& x) {
  // x[B, T, C]
  const int64_t B = x.shape()[0], T = x.shape()[1], C = x.shape()[2];
  const int64_t NH = n_head_, NKV = n_kv_head_, HS = head_size_;
  Variable q, k, v;  // [B, T, NH|NKV, HS]
  if (is_gpt2_) {
    Variable qkv = (*c_attn_)(x);  // [B, T, 3C]
    q = autograd::reshape(autograd::slice_last_dim(qkv, 0, C), Shape{B, T, NH, HS});
    k = autograd::reshape(autograd::slice_last_dim(qkv, C, C), Shape{B, T, NH, HS});
    v = autograd::reshape(autograd::slice_last_dim(qkv, 2 * C, C), Shape{B, T, NH, HS});
  } else {
    q = autograd::rope(autograd::reshape((*q_proj_)(x), Shape{B, T, NH, HS}), rope_theta_);
    k = autograd::rope(autograd::reshape((*k_proj_)(x), Shape{B, T, NKV, HS}), rope_theta_);
    v = autograd::reshape((*v_proj_)(x), Shape{B, T, NKV, HS});
  }
  Variable y = autograd::attention(q, k, v);  // [B, T, NH, HS]
  return (*out_proj_)(autograd::reshape(y, Shape{B, T, C}));
}

}  // namespace braid::nn
