#include "braid/nn/embedding.h"

#include "braid/autograd/functions.h"

namespace braid::nn {

Embedding::Embedding(int64_t num, int64_t dim, float init_std) : num_(num), dim_(dim) {
  weight_ = register_parameter("weight", Shape{num, dim}, {init_std, 0.0f});
}

Variable Embedding::operator()(const Tensor& ids, Embedding* positions) {
  enter_forward();
  if (positions) positions->enter_forward();
  Variable out =
      autograd::embedding(ids, weight_->var, positions ? positions->weight() : Variable());
  if (positions) out = positions->exit_forward(out);
  return exit_forward(out);
}

}  // namespace braid::nn
