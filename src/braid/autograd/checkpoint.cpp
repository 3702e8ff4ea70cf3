// backward_hook and checkpoint: the two functions of functions.h that reach into the engine.
//
// Note [Checkpoint rerun]: checkpoint(fn, x) runs fn(x) under NoGradGuard, so none of fn's
// intermediates are kept: only x (an input of the node) and the output. In backward, fn is
// rerun with recording on, on x' = a fresh leaf sharing x's value whose grad() IS the outer
// engine's buffer for x (or x's own grad for a leaf x). The inner backward from the rerun
// output with dout then accumulates into that buffer exactly as the plain graph would have,
// in the same order, so gradients are bit-identical to running without checkpointing.
// Parameters used in fn are leaves of the inner graph: they accumulate and fire their hooks
// during the inner backward. A parameter whose hooks must fire once per outer backward must
// therefore not be used both inside a checkpointed fn and elsewhere (or in two of them).
// The node is recorded whenever grad mode is on, even if x needs no gradient, because
// parameters inside fn may. Under a split backward the inner backward splits too (Note [Split
// backward], engine.cpp): the parameters' gradients wait for the weight pass.
#include "braid/autograd/engine.h"
#include "braid/autograd/functions.h"
#include "braid/kernels/ops.h"

namespace braid::autograd {
namespace {

class BackwardHookNode : public Node {
 public:
  explicit BackwardHookNode(std::function<void()> fn) : fn_(std::move(fn)) {}
  const char* name() const override { return "backward_hook"; }
  bool first_input_gets_dout() const override { return true; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    fn_();
    if (dinputs[0]) kernels::axpy(*dinputs[0], dout, 1.0f);
  }
  void release() override { fn_ = nullptr; }

 private:
  std::function<void()> fn_;
};

class CheckpointNode : public Node {
 public:
  explicit CheckpointNode(std::function<Variable(const Variable&)> fn) : fn_(std::move(fn)) {}
  const char* name() const override { return "checkpoint"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    const Variable& x = inputs[0];
    Variable x_rerun(x.value(), dinputs[0] != nullptr, x.name());
    if (dinputs[0]) x_rerun.set_grad(*dinputs[0]);  // Note [Checkpoint rerun]
    compute_now(x_rerun);                           // Note [Split backward]
    Variable y;
    {
      GradModeGuard recording(true);
      y = fn_(x_rerun);
    }
    BRAID_CHECK(y.defined() && y.shape() == dout.shape(),
                "checkpoint: the rerun of the "
                "function returned shape ",
                y.defined() ? y.shape().str() : "(undefined)", " but the first run returned ",
                dout.shape().str());
    if (!y.requires_grad()) return;  // nothing inside fn needs a gradient
    run_backward(y, dout, /*dout_is_owned=*/false);
  }
  void release() override { fn_ = nullptr; }

 private:
  std::function<Variable(const Variable&)> fn_;
};

}  // namespace

Variable backward_hook(const Variable& x, std::function<void()> on_backward) {
  BRAID_CHECK(x.defined(), "backward_hook: undefined input");
  if (!grad_enabled() || !x.requires_grad()) return x;
  auto node = std::make_shared<BackwardHookNode>(std::move(on_backward));
  node->inputs = {x};
  return Variable::from_node(x.value(), node);
}

Variable checkpoint(const std::function<Variable(const Variable&)>& fn, const Variable& x) {
  BRAID_CHECK(x.defined(), "checkpoint: undefined input");
  Variable y;
  {
    NoGradGuard no_grad;
    y = fn(x.detach());
  }
  BRAID_CHECK(y.defined(), "checkpoint: the function returned an undefined Variable");
  if (!grad_enabled()) return y;
  auto node = std::make_shared<CheckpointNode>(fn);
  node->inputs = {x};
  return Variable::from_node(y.value(), node);
}

}  // namespace braid::autograd
