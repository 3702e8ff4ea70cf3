// Module: a node of the model tree with named children and parameters. Dotted full names
// ("transformer.h.0.attn.c_attn.weight") follow HuggingFace exactly, so export/import is a
// rename-free walk (only GPT-2's Conv1D weights are transposed, checkpoint/hf_model_io).
//
// Parameters are declared with a shape at construction and have no storage until the tree is
// materialised (param_layout.h: a FlatBuffer holding the whole model, or a strategy's shards),
// which makes each one a view of its unit's contiguous buffer, in declaration order. Modules
// declare their parameters and children in the order forward first uses them, so that order
// is the flat layout.
//
// Hooks (Note [Module hooks]):
// - forward pre/post: around every call of the module's forward.
// - backward pre: fires when the gradient of the module's output arrives, before backward runs
//   through the module (an autograd::backward_hook on the output).
// - backward post: fires once every trainable parameter of the subtree has its final gradient
//   for this backward (their post-accumulate hooks all fired).
// FSDP gathers parameters on forward-pre / backward-pre and frees them on forward-post /
// backward-post.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "braid/autograd/variable.h"
#include "braid/nn/tensor_parallel.h"

namespace braid::nn {

using autograd::Variable;

// How FlatBuffer initialises a parameter: normal(0, std) when std > 0, else the constant.
struct ParamInit {
  float std = 0.0f;
  float value = 0.0f;
};

struct Parameter {
  std::string name;  // local name ("weight")
  Shape shape;       // what this rank holds: full_shape, or its tensor-parallel slice
  Shape full_shape;  // the parameter as one process (and HF) has it
  TpSlice tp;        // which slice of full_shape this rank holds (Note [Tensor-parallel layout])
  bool requires_grad = true;
  ParamInit init;
  // Undefined until materialised; a sharded strategy may leave its value undefined while the
  // parameter is not gathered (ParamLayout::bind_unit / unbind_unit).
  Variable var;

  // Declares this rank's slice: shape becomes the local shape (before materialisation).
  void split(const TpSlice& slice);
};

class Module {
 public:
  using ForwardPreHook = std::function<void(Module&)>;
  using ForwardPostHook = std::function<void(Module&, const Variable& output)>;
  using BackwardHook = std::function<void(Module&)>;

  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Depth-first, declaration order: own parameters first, then each child's.
  std::vector<std::pair<std::string, Parameter*>> named_parameter_slots(
      const std::string& prefix = "");
  // The materialised parameters (throws if the tree has not been materialised).
  std::vector<std::pair<std::string, Variable>> named_parameters(const std::string& prefix = "");
  std::vector<std::pair<std::string, Module*>> named_modules(const std::string& prefix = "");
  const std::vector<std::pair<std::string, std::unique_ptr<Module>>>& children() const {
    return children_;
  }
  Module* find_module(std::string_view dotted_name);  // null when absent
  int64_t num_parameters();                           // elements, whole subtree

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Freezes / unfreezes the whole subtree (before materialisation, or after: the flat
  // gradient layout keeps its ranges either way).
  void set_requires_grad(bool requires_grad);

  void register_forward_pre_hook(ForwardPreHook hook);
  void register_forward_post_hook(ForwardPostHook hook);
  void register_backward_pre_hook(BackwardHook hook);
  // Needs the tree materialised (it hangs on the parameters' post-accumulate hooks).
  void register_backward_post_hook(BackwardHook hook);

  // Forward wrappers every module's forward calls: enter_forward() runs the pre hooks;
  // exit_forward(out) runs the post hooks and, when backward-pre hooks exist and grad mode
  // is on, returns `out` wrapped so they fire when its gradient arrives.
  void enter_forward();
  Variable exit_forward(Variable out);

 protected:
  Parameter* register_parameter(std::string name, Shape shape, ParamInit init,
                                bool requires_grad = true);
  template <typename M>
  M* register_module(std::string name, std::unique_ptr<M> module) {
    M* raw = module.get();
    add_child(std::move(name), std::move(module));
    return raw;
  }

 private:
  void add_child(std::string name, std::unique_ptr<Module> module);

  std::vector<std::unique_ptr<Parameter>> params_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
  bool training_ = true;
  std::vector<ForwardPreHook> forward_pre_;
  std::vector<ForwardPostHook> forward_post_;
  std::vector<BackwardHook> backward_pre_;
  std::vector<BackwardHook> backward_post_;
  // Backward-post bookkeeping: trainable parameters of the subtree still to report in the
  // current backward (shared with the parameter hooks).
  struct BackwardPostState {
    int64_t expected = 0;
    int64_t arrived = 0;
  };
  std::shared_ptr<BackwardPostState> backward_post_state_;
};

// A module whose forward maps one Variable to one Variable; operator() runs the hooks.
class UnaryModule : public Module {
 public:
  Variable operator()(const Variable& x) {
    enter_forward();
    return exit_forward(forward(x));
  }

 protected:
  virtual Variable forward(const Variable& x) = 0;
};

// Children named "0", "1", ... (HF's nn.ModuleList).
template <typename M>
class ModuleList : public Module {
 public:
  M* append(std::unique_ptr<M> m) {
    items_.push_back(m.get());
    return register_module(std::to_string(items_.size() - 1), std::move(m));
  }
  size_t size() const { return items_.size(); }
  M& operator[](size_t i) const { return *items_.at(i); }

 private:
  std::vector<M*> items_;
};

}  // namespace braid::nn
