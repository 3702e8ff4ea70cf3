// Passes B and W of a split backward (weight_gradients.h); the engine does the splitting (Note
// [Split backward], engine.cpp).
#include "braid/autograd/weight_gradients.h"

#include <utility>

#include "braid/autograd/engine.h"
#include "braid/autograd/variable_impl.h"

namespace braid::autograd {
namespace {

// `split` is the thread's split backward in its scope (Note [Split backward], engine.cpp).
class SplitScope {
 public:
  explicit SplitScope(SplitBackward* split) { set_current_split(split); }
  ~SplitScope() { set_current_split(nullptr); }
  SplitScope(const SplitScope&) = delete;
  SplitScope& operator=(const SplitScope&) = delete;
};

}  // namespace

void backward_inputs(const Variable& root, const Tensor& dout, const std::vector<Variable>& inputs,
                     WeightGradients& weights) {
  BRAID_CHECK(!current_split(), "backward_inputs inside another split backward");
  SplitBackward split{&weights, {}};
  for (const Variable& in : inputs) {
    BRAID_CHECK(in.defined() && in.is_leaf(), "backward_inputs: input '",
                in.defined() ? in.name() : "(undefined)", "' is not a leaf");
    split.now.push_back(in.impl());
  }
  const SplitScope scope(&split);
  run_backward(root, dout, /*dout_is_owned=*/false);
}

void WeightGradients::run() {
  NoGradGuard no_grad;
  std::vector<Step> steps = std::exchange(steps_, {});
  std::vector<Variable> hooked = std::exchange(hooked_, {});
  std::vector<Tensor*> dinputs;
  for (Step& s : steps) {
    Node& node = *s.node;
    dinputs.assign(node.inputs.size(), nullptr);
    for (size_t i : s.leaves) dinputs[i] = &leaf_grad(*node.inputs[i].impl());
    node.backward(s.dout, dinputs);
    node.release();
    node.inputs.clear();
    node.released = true;
    s = {};  // its activations are free now
  }
  for (Variable& leaf : hooked) fire_hooks(leaf);
}

}  // namespace braid::autograd
