// VariableImpl: the shared state behind a Variable handle (internal to autograd/).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "braid/autograd/variable.h"

namespace braid::autograd {

struct VariableImpl {
  Tensor value;
  Tensor grad;  // leaves only: the accumulation target (Note [Grad accumulation])
  bool requires_grad = false;
  std::string name;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  std::vector<Variable::PostAccumulateHook> hooks;
};

}  // namespace braid::autograd
