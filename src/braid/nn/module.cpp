#include "braid/nn/module.h"

#include "braid/autograd/functions.h"
#include "braid/core/error.h"

namespace braid::nn {

namespace {
std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}
}  // namespace

void Parameter::split(const TpSlice& slice) {
  BRAID_CHECK(!var.defined(), "Parameter '", name, "': split after materialisation");
  BRAID_CHECK(slice.dim >= 0 && slice.dim < full_shape.dim() && slice.parts >= 1 &&
                  slice.part >= 0 && slice.part < slice.parts && slice.sections >= 1,
              "Parameter '", name, "': bad tensor-parallel slice of ", full_shape.str());
  const int64_t padded = slice.padded > 0 ? slice.padded : full_shape[slice.dim];
  BRAID_CHECK(padded >= full_shape[slice.dim] && padded % (slice.sections * slice.parts) == 0,
              "Parameter '", name, "' ", full_shape.str(), ": dim ", slice.dim, " (", padded,
              ") does not split into ", slice.sections, " x ", slice.parts, " equal parts");
  std::vector<int64_t> d = full_shape.vec();
  d[static_cast<size_t>(slice.dim)] = padded / slice.parts;
  shape = Shape(d);
  tp = slice;
}

Parameter* Module::register_parameter(std::string name, Shape shape, ParamInit init,
                                      bool requires_grad) {
  for (const auto& p : params_) {
    BRAID_CHECK(p->name != name, "Module: parameter '", name, "' declared twice");
  }
  auto p = std::make_unique<Parameter>();
  p->name = std::move(name);
  p->shape = shape;
  p->full_shape = shape;
  p->requires_grad = requires_grad;
  p->init = init;
  params_.push_back(std::move(p));
  return params_.back().get();
}

void Module::add_child(std::string name, std::unique_ptr<Module> module) {
  BRAID_CHECK(module != nullptr, "Module: child '", name, "' is null");
  for (const auto& [n, m] : children_) {
    (void)m;
    BRAID_CHECK(n != name, "Module: child '", name, "' declared twice");
  }
  children_.emplace_back(std::move(name), std::move(module));
}

std::vector<std::pair<std::string, Parameter*>> Module::named_parameter_slots(
    const std::string& prefix) {
  std::vector<std::pair<std::string, Parameter*>> out;
  for (auto& p : params_) out.emplace_back(join(prefix, p->name), p.get());
  for (auto& [name, child] : children_) {
    auto sub = child->named_parameter_slots(join(prefix, name));
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::vector<std::pair<std::string, Variable>> Module::named_parameters(const std::string& prefix) {
  std::vector<std::pair<std::string, Variable>> out;
  for (auto& [name, p] : named_parameter_slots(prefix)) {
    BRAID_CHECK(p->var.defined(), "Module: parameter '", name,
                "' has no storage yet (materialise the model into a FlatBuffer first)");
    out.emplace_back(name, p->var);
  }
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules(const std::string& prefix) {
  std::vector<std::pair<std::string, Module*>> out{{prefix, this}};
  for (auto& [name, child] : children_) {
    auto sub = child->named_modules(join(prefix, name));
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

Module* Module::find_module(std::string_view dotted) {
  if (dotted.empty()) return this;
  const size_t dot = dotted.find('.');
  const std::string_view head = dotted.substr(0, dot);
  for (auto& [name, child] : children_) {
    if (name == head) {
      return dot == std::string_view::npos ? child.get()
                                           : child->find_module(dotted.substr(dot + 1));
    }
  }
  return nullptr;
}

int64_t Module::num_parameters() {
  int64_t n = 0;
  for (auto& [name, p] : named_parameter_slots()) {
    (void)name;
    n += p->shape.numel();
  }
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) {
    (void)name;
    child->train(on);
  }
}

void Module::set_requires_grad(bool requires_grad) {
  for (auto& [name, p] : named_parameter_slots()) {
    (void)name;
    p->requires_grad = requires_grad;
    if (p->var.defined()) p->var.set_requires_grad(requires_grad);
  }
}

void Module::register_forward_pre_hook(ForwardPreHook hook) {
  forward_pre_.push_back(std::move(hook));
}

void Module::register_forward_post_hook(ForwardPostHook hook) {
  forward_post_.push_back(std::move(hook));
}

void Module::register_backward_pre_hook(BackwardHook hook) {
  backward_pre_.push_back(std::move(hook));
}

// Note [Module hooks]: backward-post counts the post-accumulate hooks of the subtree's
// trainable parameters; when the last one of this backward fires, the module's backward is
// complete (each parameter's gradient is final), the counter resets for the next backward.
// A parameter that receives no gradient in some backward (unused in that forward) would keep
// the hook from firing, so every trainable parameter must take part in the forward.
void Module::register_backward_post_hook(BackwardHook hook) {
  if (!backward_post_state_) {
    backward_post_state_ = std::make_shared<BackwardPostState>();
    for (auto& [name, p] : named_parameter_slots()) {
      BRAID_CHECK(p->var.defined(), "register_backward_post_hook: parameter '", name,
                  "' has no storage yet (materialise the model first)");
      if (!p->requires_grad) continue;
      ++backward_post_state_->expected;
      std::weak_ptr<BackwardPostState> weak = backward_post_state_;
      p->var.register_post_accumulate_hook([this, weak](Variable&) {
        auto state = weak.lock();
        if (!state) return;
        if (++state->arrived == state->expected) {
          state->arrived = 0;
          for (auto& h : backward_post_) h(*this);
        }
      });
    }
  }
  backward_post_.push_back(std::move(hook));
}

void Module::enter_forward() {
  for (auto& h : forward_pre_) h(*this);
}

Variable Module::exit_forward(Variable out) {
  for (auto& h : forward_post_) h(*this, out);
  if (!backward_pre_.empty() && autograd::grad_enabled() && out.requires_grad()) {
    out = autograd::backward_hook(out, [this] {
      for (auto& h : backward_pre_) h(*this);
    });
  }
  return out;
}

}  // namespace braid::nn
