// Linear: y[..., OC] = x[..., C] @ weight[OC, C]^T + bias[OC]. Parameters "weight" (and
// "bias" when with_bias), PyTorch nn.Linear layout. GPT-2's HF Conv1D stores the transpose;
// checkpoint/hf_model_io converts at the file boundary.
#pragma once

#include "braid/nn/module.h"

namespace braid::nn {

class Linear : public UnaryModule {
 public:
  Linear(int64_t in_features, int64_t out_features, bool with_bias, float init_std = 0.02f);

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  Variable& weight() { return weight_->var; }
  Parameter* weight_param() { return weight_; }
  Parameter* bias_param() { return bias_; }  // null without bias

 protected:
  Variable forward(const Variable& x) override;

 private:
  int64_t in_, out_;
  Parameter* weight_;
  Parameter* bias_ = nullptr;
};

}  // namespace braid::nn
