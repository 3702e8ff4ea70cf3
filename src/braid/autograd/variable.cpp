#include "braid/autograd/variable.h"

#include "braid/autograd/engine.h"
#include "braid/autograd/variable_impl.h"

namespace braid::autograd {
namespace {

// Note [Grad mode is per thread]: two ranks may run as two threads of one process, and one
// rank's no-grad evaluation must not switch off recording in the other.
thread_local bool t_grad_enabled = true;
thread_local uint64_t t_next_sequence_nr = 0;

VariableImpl& checked(const std::shared_ptr<VariableImpl>& impl, const char* what) {
  BRAID_CHECK(impl != nullptr, "Variable::", what, " on an undefined Variable");
  return *impl;
}

}  // namespace

bool grad_enabled() {
  return t_grad_enabled;
}
NoGradGuard::NoGradGuard() : prev_(t_grad_enabled) {
  t_grad_enabled = false;
}
NoGradGuard::~NoGradGuard() {
  t_grad_enabled = prev_;
}
GradModeGuard::GradModeGuard(bool enabled) : prev_(t_grad_enabled) {
  t_grad_enabled = enabled;
}
GradModeGuard::~GradModeGuard() {
  t_grad_enabled = prev_;
}

Node::Node() : sequence_nr(t_next_sequence_nr++) {}

void Node::backward_fresh(const Tensor& dout, const std::vector<Tensor*>& dinputs,
                          const std::vector<bool>& fresh) {
  for (size_t i = 0; i < dinputs.size(); ++i)
    if (fresh[i]) dinputs[i]->zero_();
  backward(dout, dinputs);
}

Variable::Variable(Tensor value, bool requires_grad, std::string name)
    : impl_(std::make_shared<VariableImpl>()) {
  BRAID_CHECK(value.defined(), "Variable '", name, "': the value tensor is undefined");
  BRAID_CHECK(!requires_grad || is_floating(value.dtype()), "Variable '", name,
              "': only floating tensors can require grad, got ", dtype_name(value.dtype()));
  impl_->value = std::move(value);
  impl_->requires_grad = requires_grad;
  impl_->name = std::move(name);
}

Variable Variable::unbound(bool requires_grad, std::string name) {
  Variable v;
  v.impl_ = std::make_shared<VariableImpl>();
  v.impl_->requires_grad = requires_grad;
  v.impl_->name = std::move(name);
  return v;
}

Variable Variable::from_node(Tensor value, std::shared_ptr<Node> node) {
  BRAID_CHECK(node != nullptr, "Variable::from_node: null node");
  BRAID_CHECK(value.defined(), "Variable::from_node(", node->name(), "): undefined value");
  Variable v;
  v.impl_ = std::make_shared<VariableImpl>();
  v.impl_->value = std::move(value);
  v.impl_->requires_grad = true;
  v.impl_->grad_fn = std::move(node);
  return v;
}

const Tensor& Variable::value() const {
  return checked(impl_, "value").value;
}
Tensor& Variable::value() {
  return checked(impl_, "value").value;
}
bool Variable::requires_grad() const {
  return impl_ != nullptr && impl_->requires_grad;
}

void Variable::set_requires_grad(bool r) {
  auto& impl = checked(impl_, "set_requires_grad");
  BRAID_CHECK(impl.grad_fn == nullptr, "set_requires_grad on '", impl.name, "', a result of ",
              impl.grad_fn->name(), ": only leaves can change requires_grad");
  BRAID_CHECK(!r || is_floating(impl.value.dtype()), "set_requires_grad on '", impl.name,
              "': only floating tensors can require grad, got ", dtype_name(impl.value.dtype()));
  impl.requires_grad = r;
}

const std::string& Variable::name() const {
  return checked(impl_, "name").name;
}
void Variable::set_name(std::string name) {
  checked(impl_, "set_name").name = std::move(name);
}
const Tensor& Variable::grad() const {
  return checked(impl_, "grad").grad;
}

void Variable::set_grad(Tensor g) {
  auto& impl = checked(impl_, "set_grad");
  BRAID_CHECK(impl.grad_fn == nullptr, "set_grad on a result of ", impl.grad_fn->name(),
              ": only leaves hold gradients");
  BRAID_CHECK(!g.defined() || g.shape() == impl.value.shape(), "set_grad on '", impl.name,
              "': gradient shape ", g.shape().str(), " does not match value shape ",
              impl.value.shape().str());
  impl.grad = std::move(g);
}

void Variable::zero_grad() {
  auto& impl = checked(impl_, "zero_grad");
  BRAID_CHECK(impl.grad_fn == nullptr, "zero_grad on a result of ", impl.grad_fn->name(),
              ": only leaves hold gradients");
  if (!impl.grad.defined())
    impl.grad = Tensor::empty(impl.value.shape(), impl.value.dtype(), MemCategory::gradients);
  impl.grad.zero_();
}

const std::shared_ptr<Node>& Variable::grad_fn() const {
  static const std::shared_ptr<Node> kNone;  // immutable: safe to share between threads
  return impl_ ? impl_->grad_fn : kNone;
}

void Variable::register_post_accumulate_hook(PostAccumulateHook hook, bool first) {
  auto& impl = checked(impl_, "register_post_accumulate_hook");
  BRAID_CHECK(impl.grad_fn == nullptr && impl.requires_grad, "register_post_accumulate_hook on '",
              impl.name, "': only leaves that require grad get post-accumulate hooks");
  if (first)
    impl.hooks.insert(impl.hooks.begin(), std::move(hook));
  else
    impl.hooks.push_back(std::move(hook));
}

void Variable::backward(float seed) const {
  const Tensor& v = value();
  BRAID_CHECK(v.numel() == 1, "backward() without an output gradient needs a scalar, got shape ",
              v.shape().str(), "; pass dout for non-scalar outputs");
  Tensor dout = Tensor::empty(v.shape(), v.dtype(), MemCategory::activations);
  dout.fill_(seed);
  run_backward(*this, dout, /*dout_is_owned=*/true);
}

void Variable::backward(const Tensor& dout) const {
  run_backward(*this, dout, false);
}

Variable Variable::detach() const {
  const auto& impl = checked(impl_, "detach");
  return Variable(impl.value, false, impl.name);
}

}  // namespace braid::autograd
