// Tiny test-local differentiable ops written with plain loops (f32 only), so engine tests do
// not depend on the kernels. Outputs are charged to MemCategory::activations like real ops.
#pragma once

#include <vector>

#include "braid/autograd/variable.h"

namespace braid::autograd::test {

// out = a * b element-wise; saves nothing beyond its inputs.
class MulNode : public Node {
 public:
  const char* name() const override { return "test_mul"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    const float* g = dout.data<float>();
    const float* a = inputs[0].value().data<float>();
    const float* b = inputs[1].value().data<float>();
    for (int64_t i = 0; i < dout.numel(); ++i) {
      if (dinputs[0]) dinputs[0]->data<float>()[i] += g[i] * b[i];
      if (dinputs[1]) dinputs[1]->data<float>()[i] += g[i] * a[i];
    }
  }
};

inline Variable mul(const Variable& a, const Variable& b) {
  Tensor out = Tensor::empty(a.shape(), DType::f32, MemCategory::activations);
  for (int64_t i = 0; i < out.numel(); ++i)
    out.data<float>()[i] = a.value().data<float>()[i] * b.value().data<float>()[i];
  if (!grad_enabled() || !(a.requires_grad() || b.requires_grad())) return Variable(out);
  auto node = std::make_shared<MulNode>();
  node->inputs = {a, b};
  return Variable::from_node(out, node);
}

// out[1] = sum(x); saves a scratch tensor to show release() frees it.
class SumNode : public Node {
 public:
  const char* name() const override { return "test_sum"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    if (!dinputs[0]) return;
    for (int64_t i = 0; i < dinputs[0]->numel(); ++i)
      dinputs[0]->data<float>()[i] += dout.data<float>()[0];
  }
  void release() override { saved = Tensor(); }
  Tensor saved;
};

inline Variable sum(const Variable& x) {
  Tensor out = Tensor::empty(Shape{1}, DType::f32, MemCategory::activations);
  float s = 0;
  for (int64_t i = 0; i < x.value().numel(); ++i) s += x.value().data<float>()[i];
  out.data<float>()[0] = s;
  if (!grad_enabled() || !x.requires_grad()) return Variable(out);
  auto node = std::make_shared<SumNode>();
  node->inputs = {x};
  node->saved = Tensor::empty(x.shape(), DType::f32, MemCategory::activations);
  return Variable::from_node(out, node);
}

inline Tensor vec(std::vector<float> v) {
  auto n = static_cast<int64_t>(v.size());
  return Tensor::from_vector(v, Shape{n});
}

}  // namespace braid::autograd::test
