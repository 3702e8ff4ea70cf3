// Linear: y[..., OC] = x[..., C] @ weight[OC, C]^T + bias[OC]. Parameters "weight" (and
// "bias" when with_bias), PyTorch nn.Linear layout. GPT-2's HF Conv1D stores the transpose;
// checkpoint/hf_model_io converts at the file boundary.
//
// Under tensor parallelism (Note [Tensor-parallel layout], tensor_parallel.h) a Linear is
// column-parallel (this rank holds some output rows of weight and bias; its caller passes the
// input through TensorParallel::enter once for all the layers that share it) or row-parallel
// (this rank holds some input columns; forward sums the partial outputs with
// TensorParallel::exit, then adds the replicated bias).
#pragma once

#include "braid/nn/module.h"

namespace braid::nn {

struct LinearSplit {
  enum class Kind { none, column, row };
  Kind kind = Kind::none;
  TensorParallel* tp = nullptr;
  int64_t sections = 1;  // column: the output is this many sections split each (q, k, v)
  // column: the output rows are split in `parts` (0: tp->size()); with fewer parts than ranks
  // each part is replicated on tp->size() / parts consecutive ranks (kv heads) and its
  // gradient summed over them.
  int parts = 0;

  static LinearSplit column(TensorParallel* tp, int64_t sections = 1, int parts = 0) {
    return {Kind::column, tp, sections, parts};
  }
  static LinearSplit row(TensorParallel* tp) { return {Kind::row, tp}; }
};

class Linear : public UnaryModule {
 public:
  Linear(int64_t in_features, int64_t out_features, bool with_bias, float init_std = 0.02f,
         const LinearSplit& split = {});

  int64_t in_features() const { return in_; }    // full (unsplit)
  int64_t out_features() const { return out_; }  // full (unsplit)
  Variable& weight() { return weight_->var; }
  Parameter* weight_param() { return weight_; }
  Parameter* bias_param() { return bias_; }  // null without bias

 protected:
  Variable forward(const Variable& x) override;

 private:
  int64_t in_, out_;
  LinearSplit split_;
  int replicas_ = 1;  // column with fewer parts than ranks: ranks per part
  Parameter* weight_;
  Parameter* bias_ = nullptr;
};

}  // namespace braid::nn
