// Note [Backward order]: backward runs a node once every consumer of its output (within this
// graph) has run, i.e. in reverse topological order. Among ready nodes the one created last
// runs first (highest sequence_nr, as in PyTorch), so the order is deterministic, follows
// the reverse of the forward, and a parameter's gradient becomes final about as early as it
// can: the order DDP buckets and ZeRO-2 reduce-scatters want.
//
// Note [Gradient buffers]: the gradient of each non-leaf output is a buffer allocated zeroed
// (category activations) on its first contribution; every consumer's backward accumulates
// into it (kernels accumulate, see kernels/ops.h) and it is freed as soon as its node has
// run. A node whose first input's gradient is dout itself (reshape, backward_hook, add:
// first_input_gets_dout) hands its own buffer over when that input has none yet, instead of a
// zeroed buffer and an add: a residual stream's gradient is then one buffer that each block's
// add passes down and each block's branch accumulates into, as an in-place += would. A node
// that can set an input's gradient outright (sets_fresh_grad: a linear's dinp is a GEMM with
// beta 0, an add's second input a copy) gets that input's new buffer unzeroed
// (backward_fresh), which saves the zeroing and the kernel's read of the zeros. After a node
// runs, its saved tensors (release()) and its inputs are dropped, so activations are freed during
// backward, not after it.
//
// Note [Grad accumulation]: leaves that require grad receive the kernels' += directly in
// their grad() tensor (a view into a flat gradient buffer for parameters): no temporary, no
// copy. A leaf without one gets a zeroed tensor in category gradients. Its post-accumulate
// hooks fire right after the last consumer in this backward has run.
//
// Note [Split backward]: under backward_inputs (weight_gradients.h), a node with leaf inputs
// other than the split's `now` leaves runs its backward for its other inputs only (not at all
// if it has none), and is recorded with its output gradient and those leaf inputs instead of
// being released: until the weight pass it keeps its saved tensors, its inputs' values and that
// gradient (for a linear, x and dout: about what 1F1B frees at B is kept to W); a node whose
// backward recomputes (the CPU's LM head: its logits) recomputes in both passes. Leaves of the
// split get no hooks here; the weight pass fires them in the order this backward would have.
// A checkpoint's inner backward runs under the same split, its rerun input computed now.
#include "braid/autograd/engine.h"

#include <algorithm>
#include <queue>
#include <unordered_map>
#include <vector>

#include "braid/autograd/variable_impl.h"

namespace braid::autograd {
namespace {

struct NodeState {
  std::shared_ptr<Node> keep;  // consumers drop their inputs once run: keep pending nodes alive
  int pending = 0;             // consumers in this graph that have not run yet
  Tensor grad;                 // gradient of the node's output (Note [Gradient buffers])
  bool owned = true;           // the engine allocated grad and may hand it on
};

struct LaterFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

// Whether the node's input i is also another of its inputs (add(h, h)): dout's buffer then
// cannot become that input's gradient, nor can one write set it, as both add into it.
bool used_again(const Node& node, size_t i) {
  for (size_t j = 0; j < node.inputs.size(); ++j)
    if (j != i && node.inputs[j].impl() == node.inputs[i].impl()) return true;
  return false;
}

void check_not_released(const Node& node) {
  BRAID_CHECK(!node.released, "backward through the ", node.name(),
              " node a second time: its saved tensors were freed by the first backward "
              "(run the forward again)");
}

// dst += src, any float dtypes (only used for a leaf root, which is rare and small).
void accumulate(Tensor& dst, const Tensor& src) {
  if (!dst.device().is_cpu()) {
    Tensor host = dst.to(Device::cpu());
    accumulate(host, src);
    dst.copy_(host);
    return;
  }
  std::vector<float> d = dst.to_f32_vector();
  std::vector<float> s = src.to_f32_vector();
  for (size_t i = 0; i < d.size(); ++i) d[i] += s[i];
  convert_from_f32(d.data(), dst.raw_data(), dst.dtype(), dst.numel());
}

bool wants_grad(const Variable& v) {
  return v.defined() && v.requires_grad();
}

thread_local SplitBackward* t_split = nullptr;

}  // namespace

Tensor& leaf_grad(VariableImpl& leaf) {
  if (!leaf.grad.defined()) {
    leaf.grad = Tensor::empty(leaf.value.shape(), leaf.value.dtype(), MemCategory::gradients);
    leaf.grad.zero_();
  }
  return leaf.grad;
}

void fire_hooks(Variable& leaf) {
  // Copy: a hook may register further hooks.
  auto hooks = leaf.impl()->hooks;
  for (auto& hook : hooks) hook(leaf);
}

bool SplitBackward::computes_now(const VariableImpl* leaf) const {
  return std::find(now.begin(), now.end(), leaf) != now.end();
}

SplitBackward* current_split() {
  return t_split;
}

void set_current_split(SplitBackward* split) {
  t_split = split;
}

void compute_now(const Variable& leaf) {
  if (t_split && leaf.defined()) t_split->now.push_back(leaf.impl());
}

void run_backward(const Variable& root, const Tensor& dout, bool dout_is_owned) {
  BRAID_CHECK(root.defined(), "backward on an undefined Variable");
  BRAID_CHECK(root.requires_grad(), "backward on '", root.name(),
              "', which does not require grad (no input requires grad, or it was computed "
              "under NoGradGuard)");
  BRAID_CHECK(dout.defined() && dout.numel() == root.value().numel(),
              "backward: output gradient of shape ", dout.shape().str(), " for an output of shape ",
              root.value().shape().str());
  NoGradGuard no_grad;  // backward kernels run on plain tensors; nothing is recorded

  Variable root_copy = root;
  if (root.is_leaf()) {
    accumulate(leaf_grad(*root.impl()), dout);
    fire_hooks(root_copy);
    return;
  }

  // Discover the graph: pending consumer counts of nodes and of leaves.
  std::unordered_map<Node*, NodeState> nodes;
  std::unordered_map<VariableImpl*, int> leaf_pending;
  Node* root_node = root.grad_fn().get();
  check_not_released(*root_node);
  nodes[root_node].keep = root.grad_fn();
  std::vector<Node*> stack{root_node};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Variable& in : node->inputs) {
      if (!wants_grad(in)) continue;
      if (in.is_leaf()) {
        ++leaf_pending[in.impl()];
        continue;
      }
      Node* child = in.grad_fn().get();
      check_not_released(*child);
      auto [it, inserted] = nodes.try_emplace(child);
      ++it->second.pending;
      if (inserted) {
        it->second.keep = in.grad_fn();
        stack.push_back(child);
      }
    }
  }

  NodeState& root_state = nodes[root_node];
  if (dout.dtype() == root.value().dtype()) {
    root_state.grad = dout.view(root.value().shape());
    root_state.owned = dout_is_owned;
  } else {  // e.g. an f32 seed for a bf16 output: kernels want one dtype
    root_state.grad =
        Tensor::empty(root.value().shape(), root.value().dtype(), MemCategory::activations);
    root_state.grad.copy_(dout);
  }

  SplitBackward* const split = t_split;  // Note [Split backward]
  auto deferred = [&](const Variable& leaf) { return split && !split->computes_now(leaf.impl()); };
  std::priority_queue<Node*, std::vector<Node*>, LaterFirst> ready;
  ready.push(root_node);
  std::vector<Tensor*> dinputs;
  std::vector<bool> fresh;    // dinputs[i] is a new buffer the node sets (sets_fresh_grad)
  std::vector<size_t> later;  // the node's leaf inputs left to the weight pass
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    NodeState& state = nodes.at(node);
    later.clear();
    if (split)
      for (size_t i = 0; i < node->inputs.size(); ++i)
        if (wants_grad(node->inputs[i]) && node->inputs[i].is_leaf() && deferred(node->inputs[i]))
          later.push_back(i);
    dinputs.assign(node->inputs.size(), nullptr);
    fresh.assign(node->inputs.size(), false);
    bool any_fresh = false;
    bool computes = later.empty();
    for (size_t i = 0; i < node->inputs.size(); ++i) {
      const Variable& in = node->inputs[i];
      if (!wants_grad(in) || std::find(later.begin(), later.end(), i) != later.end()) continue;
      computes = true;
      if (in.is_leaf()) {
        dinputs[i] = &leaf_grad(*in.impl());
        continue;
      }
      NodeState& child = nodes.at(in.grad_fn().get());
      if (child.grad.defined()) {
        dinputs[i] = &child.grad;
      } else if (i == 0 && node->first_input_gets_dout() && state.owned && later.empty() &&
                 state.grad.dtype() == in.value().dtype() && !used_again(*node, 0)) {
        child.grad = state.grad.view(in.value().shape());  // hand the buffer on, no copy
      } else {
        child.grad =
            Tensor::empty(in.value().shape(), in.value().dtype(), MemCategory::activations);
        if (node->sets_fresh_grad(i) && !used_again(*node, i)) {
          fresh[i] = true;
          any_fresh = true;
        } else {
          child.grad.zero_();
        }
        dinputs[i] = &child.grad;
      }
    }
    if (computes && any_fresh) {
      node->backward_fresh(state.grad, dinputs, fresh);
    } else if (computes) {
      node->backward(state.grad, dinputs);
    }
    if (!later.empty()) split->weights->steps_.push_back({state.keep, state.grad, later});
    state.grad = Tensor();

    for (Variable& in : node->inputs) {
      if (!wants_grad(in)) continue;
      if (in.is_leaf()) {
        if (--leaf_pending.at(in.impl()) > 0) continue;
        if (deferred(in))
          split->weights->hooked_.push_back(in);
        else
          fire_hooks(in);
      } else if (--nodes.at(in.grad_fn().get()).pending == 0) {
        ready.push(in.grad_fn().get());
      }
    }
    if (!later.empty()) continue;  // kept for the weight pass
    node->release();
    node->inputs.clear();
    node->released = true;
  }
}

}  // namespace braid::autograd
