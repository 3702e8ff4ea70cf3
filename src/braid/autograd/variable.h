// Variable: a Tensor that takes part in reverse-mode autodiff. Leaves (parameters, inputs)
// have no grad_fn; results of differentiable functions (functions.h) record a Node on the
// tape. Variable is a shared handle: copies refer to the same value and gradient.
//
// Gradients of leaves accumulate (+=) into `grad()`, which for parameters is a view into the
// unit's flat gradient buffer (nn/flat_buffer.h) and must exist (zero_grad) before backward.
// Each leaf may carry post-accumulate hooks, fired once its gradient for the current backward
// is final (every consumer has run); DDP buckets and ZeRO reduce-scatters hang on them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/core/tensor.h"

namespace braid::autograd {

class Node;
struct VariableImpl;

class Variable {
 public:
  Variable() = default;
  // A leaf. requires_grad leaves need a grad tensor before backward (set_grad or zero_grad).
  explicit Variable(Tensor value, bool requires_grad = false, std::string name = "");
  // A leaf with no value yet: a parameter a sharded runtime keeps in pieces and binds when it
  // gathers them (ParamLayout::declare_unit).
  static Variable unbound(bool requires_grad, std::string name);

  bool defined() const { return impl_ != nullptr; }
  const Tensor& value() const;
  Tensor& value();
  const Shape& shape() const { return value().shape(); }
  bool requires_grad() const;
  void set_requires_grad(bool r);
  const std::string& name() const;
  void set_name(std::string name);

  // Leaves: the accumulated gradient (undefined until set). Non-leaves: undefined.
  const Tensor& grad() const;
  void set_grad(Tensor g);  // g must match value's shape; becomes the accumulation target
  void zero_grad();         // allocates (category gradients) if needed, then zeroes

  const std::shared_ptr<Node>& grad_fn() const;
  bool is_leaf() const { return grad_fn() == nullptr; }

  using PostAccumulateHook = std::function<void(Variable&)>;
  // Hooks run in registration order; `first` puts this one before those already registered
  // (an observer that must see the gradient before a strategy's hook sends it away).
  void register_post_accumulate_hook(PostAccumulateHook hook, bool first = false);

  // Runs backward from this scalar (numel 1) with seed gradient `seed` (default 1).
  void backward(float seed = 1.0f) const;
  // Runs backward from a non-scalar with an explicit output gradient.
  void backward(const Tensor& dout) const;

  Variable detach() const;  // same value, no history, no grad
  VariableImpl* impl() const { return impl_.get(); }
  bool same(const Variable& o) const { return impl_ == o.impl_; }

  // Used by functions.h / Node: a non-leaf result recorded on the tape.
  static Variable from_node(Tensor value, std::shared_ptr<Node> node);

 private:
  std::shared_ptr<VariableImpl> impl_;
};

// A recorded op. Inputs are the Variables it consumed (kept alive until backward runs).
// backward() receives the gradient of the op's output and ACCUMULATES into dinputs[i]
// (null when input i needs no gradient) following kernels/ops.h conventions.
class Node {
 public:
  Node();  // takes the next sequence number of this thread (see Note [Backward order])
  virtual ~Node() = default;
  virtual const char* name() const = 0;
  virtual void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) = 0;
  // Drops saved tensors after backward (frees activations).
  virtual void release() {}
  // True when d(inputs[0]) is dout itself, under inputs[0]'s shape and dtype (a reshape, a
  // residual add): the engine may then hand dout's buffer to the input instead of zeroing one
  // and adding dout into it (Note [Gradient buffers]); backward() is still called, with
  // dinputs[0] null in that case.
  virtual bool first_input_gets_dout() const { return false; }
  // True when backward_fresh() can set input i's gradient instead of adding into it: the engine
  // then skips zeroing a buffer it has just allocated for it (Note [Gradient buffers]).
  virtual bool sets_fresh_grad(size_t /*i*/) const { return false; }
  // backward() where fresh[i] marks the inputs whose buffers are new and unzeroed (only those
  // sets_fresh_grad(i) allows): each is set, the others are added into as backward() does.
  virtual void backward_fresh(const Tensor& dout, const std::vector<Tensor*>& dinputs,
                              const std::vector<bool>& fresh);

  std::vector<Variable> inputs;
  // Creation order on this thread; later nodes run first in backward.
  uint64_t sequence_nr = 0;
  // Set once backward has run through this node and dropped its inputs and saved tensors.
  bool released = false;
};

// Gradient recording is on by default, per thread; NoGradGuard turns it off in its scope.
bool grad_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Sets grad mode to `enabled` in its scope (checkpoint reruns forward with recording on from
// inside a backward, which itself runs with recording off).
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled);
  ~GradModeGuard();
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace braid::autograd
