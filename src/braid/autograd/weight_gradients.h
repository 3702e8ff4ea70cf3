// WeightGradients: the weight-gradient half of a split backward, for zero-bubble pipeline
// schedules (Qi et al., "Zero Bubble Pipeline Parallelism", 2023).
//
// backward_inputs(root, dout, inputs, weights) is pass B: it backpropagates like
// Variable::backward, but of the leaves it computes now only the gradients of `inputs` (a
// pipeline stage's received activations); for every other leaf (the parameters) it records the
// computations that would accumulate its gradient, each a node, its output gradient and which
// of its inputs, in `weights`. weights.run() is pass W: it runs them in the order they were
// recorded, then fires the post-accumulate hooks of those leaves in the order one backward would
// have fired them. Note [Split backward] (engine.cpp) says what is kept between the two passes.
//
// Contract: B then W accumulate into every leaf's grad() what one backward would, each parameter
// in the same order, so the gradients are the same bit for bit (weight_gradients_test checks
// it); nothing may change a recorded leaf's value or grad binding between B and W (sharded
// parameters, freed after B, are not supported). A node computes each dinputs[i] on its own
// (kernels/ops.h: a null gradient is skipped), so its backward can run twice, once for the
// non-leaf inputs and once for the leaves.
#pragma once

#include <memory>
#include <vector>

#include "braid/autograd/variable.h"

namespace braid::autograd {

class WeightGradients {
 public:
  WeightGradients() = default;
  WeightGradients(WeightGradients&&) = default;
  WeightGradients& operator=(WeightGradients&&) = default;
  WeightGradients(const WeightGradients&) = delete;
  WeightGradients& operator=(const WeightGradients&) = delete;

  // Nothing recorded: no computation and no hook to fire.
  bool empty() const { return steps_.empty() && hooked_.empty(); }
  size_t size() const { return steps_.size(); }  // recorded node computations
  // Pass W: every recorded computation, then the hooks; leaves this empty.
  void run();

 private:
  friend void run_backward(const Variable& root, const Tensor& dout, bool dout_is_owned);
  struct Step {
    std::shared_ptr<Node> node;  // kept unreleased until run()
    Tensor dout;                 // the gradient of the node's output
    std::vector<size_t> leaves;  // indices into node->inputs
  };
  std::vector<Step> steps_;
  std::vector<Variable> hooked_;  // leaves whose hooks fire after the steps, in order
};

// Pass B from `root` with output gradient `dout` (root's shape): the gradients of the non-leaf
// values and of the leaves `inputs` are computed now, every other leaf's are recorded in
// `weights` (appended: several backwards may share one WeightGradients).
void backward_inputs(const Variable& root, const Tensor& dout, const std::vector<Variable>& inputs,
                     WeightGradients& weights);

}  // namespace braid::autograd
