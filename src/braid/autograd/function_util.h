// Helpers shared by the differentiable functions (internal to autograd/).
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "braid/autograd/variable.h"

namespace braid::autograd::detail {

// Whether a function must record a node: grad mode on and some defined input requires grad.
inline bool should_record(std::initializer_list<const Variable*> inputs) {
  if (!grad_enabled()) return false;
  for (const Variable* v : inputs)
    if (v->defined() && v->requires_grad()) return true;
  return false;
}

inline Tensor activation(const Shape& shape, DType dtype) {
  return Tensor::empty(shape, dtype, MemCategory::activations);
}

// The result: a leaf without history, or a non-leaf recorded on `node` with `inputs`.
template <typename N>
Variable result(Tensor out, bool record, std::shared_ptr<N> node, std::vector<Variable> inputs) {
  if (!record) return Variable(std::move(out));
  node->inputs = std::move(inputs);
  return Variable::from_node(std::move(out), std::move(node));
}

// [..., C] -> [N, C]
inline Shape rows(const Shape& s) {
  int64_t c = s.dim() ? s[-1] : 1;
  return Shape{c ? s.numel() / c : 0, c};
}

// s with its last dimension replaced by c.
inline Shape with_last(const Shape& s, int64_t c) {
  std::vector<int64_t> d = s.vec();
  d.back() = c;
  return Shape(d);
}

inline Tensor view_or_empty(Tensor* t, const Shape& s) {
  return t ? t->view(s) : Tensor();
}
inline Tensor* ptr(Tensor& t) {
  return t.defined() ? &t : nullptr;
}

inline void check_defined(const char* fn, const char* name, const Variable& v) {
  BRAID_CHECK(v.defined(), fn, ": ", name, " is undefined");
}

inline void check_same_dtype(const char* fn, const char* name, const Variable& v,
                             const char* ref_name, const Variable& ref) {
  BRAID_CHECK(v.value().dtype() == ref.value().dtype(), fn, ": ", name, " has dtype ",
              dtype_name(v.value().dtype()), " but ", ref_name, " has ",
              dtype_name(ref.value().dtype()));
}

}  // namespace braid::autograd::detail
