// DeepSpeed-Ulysses over the cp group: with the sequence split contiguous (rank j holds tokens
// [j Tl, (j+1) Tl)), an all-to-all turns this rank's tokens of every head, [B, Tl, H, HS], into
// every token of its head group, [B, T, H / n, HS] (head group j = heads [j H/n, (j+1) H/n),
// and query head h's key/value head h / (NH / NKV) falls in the same group number). Ordinary
// causal attention runs on that, and the inverse all-to-all returns the output to the token
// split. Each is the other's backward. Per layer and rank: q, k, v and the output once each way
// forward, the same backward, (n-1)/n of each tensor.
#include <cstring>

#include "braid/autograd/functions.h"
#include "braid/core/error.h"
#include "braid/kernels/ops.h"
#include "braid/parallel/context/cp_group.h"

namespace braid::parallel {

using autograd::Node;
using autograd::Variable;

namespace {

// The two layouts of one tensor: tokens [B, Tl, H, HS] <-> heads [B, n Tl, H/n, HS]. The
// all-to-all's message to (from) rank j is [B, Tl, H/n, HS]: this rank's tokens of head group j
// (rank j's tokens of this rank's head group).
Tensor swap_split(CpGroup& cp, const Tensor& x, bool to_heads) {
  const int n = cp.size();
  const int64_t B = x.size(0), HS = x.size(3);
  const int64_t Tl = to_heads ? x.size(1) : x.size(1) / n;
  const int64_t Hn = to_heads ? x.size(2) / n : x.size(2);                  // heads per group
  const size_t run = static_cast<size_t>(Hn * HS) * dtype_size(x.dtype());  // one token's group
  // Where token (b, t) of head group j lies, in runs: in the token layout, the head layout,
  // and the all-to-all's buffers (message j).
  enum class Layout { tokens, heads, message };
  const auto offset = [&](Layout l, int64_t j, int64_t b, int64_t t) {
    const int64_t i = l == Layout::tokens  ? (b * Tl + t) * n + j
                      : l == Layout::heads ? b * n * Tl + j * Tl + t
                                           : (j * B + b) * Tl + t;
    return static_cast<size_t>(i) * run;
  };
  const auto copy_runs = [&](void* to, Layout to_layout, const void* from, Layout from_layout) {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < Tl; ++t)
          std::memcpy(static_cast<char*>(to) + offset(to_layout, j, b, t),
                      static_cast<const char*>(from) + offset(from_layout, j, b, t), run);
  };
  Tensor send = Tensor::empty(Shape{x.numel()}, x.dtype(), MemCategory::communication);
  Tensor recv = Tensor::empty(Shape{x.numel()}, x.dtype(), MemCategory::communication);
  copy_runs(send.raw_data(), Layout::message, x.raw_data(),
            to_heads ? Layout::tokens : Layout::heads);
  cp.wait(cp.group().all_to_all(recv, send), send.nbytes() / n * (n - 1));
  const Shape shape = to_heads ? Shape{B, n * Tl, Hn, HS} : Shape{B, Tl, n * Hn, HS};
  Tensor out = Tensor::empty(shape, x.dtype(), MemCategory::activations);
  copy_runs(out.raw_data(), to_heads ? Layout::heads : Layout::tokens, recv.raw_data(),
            Layout::message);
  return out;
}

class SwapSplitNode : public Node {
 public:
  SwapSplitNode(CpGroup* cp, bool to_heads) : cp_(cp), to_heads_(to_heads) {}
  const char* name() const override { return to_heads_ ? "ulysses_to_heads" : "ulysses_to_tokens"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    const Tensor dx = swap_split(*cp_, dout, !to_heads_);
    if (dinputs[0]) kernels::axpy(*dinputs[0], dx, 1.0f);
  }

 private:
  CpGroup* cp_;
  bool to_heads_;
};

Variable swap(CpGroup& cp, const Variable& x, bool to_heads) {
  Tensor out = swap_split(cp, x.value(), to_heads);
  if (!autograd::grad_enabled() || !x.requires_grad()) return Variable(std::move(out));
  auto node = std::make_shared<SwapSplitNode>(&cp, to_heads);
  node->inputs = {x};
  return Variable::from_node(std::move(out), std::move(node));
}

}  // namespace

Variable ulysses_attention(CpGroup& cp, const Variable& q, const Variable& k, const Variable& v) {
  const int n = cp.size();
  BRAID_CHECK(q.shape().dim() == 4 && k.shape().dim() == 4 && q.shape()[2] % n == 0 &&
                  k.shape()[2] % n == 0,
              "ulysses attention: q ", q.shape().str(), " and k ", k.shape().str(),
              " need query and key/value head counts divisible by context_parallel_size ", n);
  const Variable y = autograd::attention(swap(cp, q, true), swap(cp, k, true), swap(cp, v, true));
  return swap(cp, y, false);
}

}  // namespace braid::parallel
