// DeepSpeed-Ulysses over the cp group: with the sequence split contiguous (rank j holds tokens
// [j Tl, (j+1) Tl)), an all-to-all turns this rank's tokens of every head, [B, Tl, H, HS], into
// every token of its head group, [B, T, H / n, HS] (head group j = heads [j H/n, (j+1) H/n),
// and query head h's key/value head h / (NH / NKV) falls in the same group number). Ordinary
// causal attention runs on that, and the inverse all-to-all returns the output to the token
// split. Each is the other's backward. Per layer and rank: q, k, v and the output once each way
// forward, the same backward, (n-1)/n of each tensor.
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
// (rank j's tokens of this rank's head group). In runs of one token's head group (H/n HS
// elements), token (b, t) of group j lies at run (b Tl + t) n + j of the token layout, at
// b n Tl + j Tl + t of the head layout and at (j B + b) Tl + t of the messages. So a message is
// a column block of the token layout viewed [B Tl, n run] (kernels::copy_columns /
// set_columns), and B row blocks of Tl runs of the head layout (one copy each): the same ops on
// the CPU and on a device.
Tensor swap_split(CpGroup& cp, const Tensor& x, bool to_heads) {
  const int n = cp.size();
  const int64_t B = x.size(0), HS = x.size(3);
  const int64_t Tl = to_heads ? x.size(1) : x.size(1) / n;
  const int64_t Hn = to_heads ? x.size(2) / n : x.size(2);  // heads per group
  const int64_t run = Hn * HS, message = B * Tl * run;
  const Shape shape = to_heads ? Shape{B, n * Tl, Hn, HS} : Shape{B, Tl, n * Hn, HS};
  Tensor send = Tensor::empty(Shape{x.numel()}, x.dtype(), MemCategory::communication);
  Tensor recv = Tensor::empty(Shape{x.numel()}, x.dtype(), MemCategory::communication);
  Tensor out = Tensor::empty(shape, x.dtype(), MemCategory::activations);
  const Tensor tokens = (to_heads ? x : out).view(Shape{B * Tl, n * run});
  // Message j of `messages` and its runs as [B Tl, run].
  const auto block = [&](const Tensor& messages, int64_t j) {
    return messages.flat_range(j * message, message).view(Shape{B * Tl, run});
  };
  // Row block (j, b) of the head layout and of the messages: Tl runs each.
  const auto heads_rows = [&](const Tensor& heads, int64_t j, int64_t b) {
    return heads.flat_range((b * n + j) * Tl * run, Tl * run);
  };
  const auto message_rows = [&](const Tensor& messages, int64_t j, int64_t b) {
    return messages.flat_range((j * B + b) * Tl * run, Tl * run);
  };
  for (int64_t j = 0; j < n; ++j) {
    if (to_heads) {
      Tensor m = block(send, j);
      kernels::copy_columns(m, tokens, j * run);
    } else {
      for (int64_t b = 0; b < B; ++b) message_rows(send, j, b).copy_(heads_rows(x, j, b));
    }
  }
  cp.wait(cp.group().all_to_all(recv, send), send.nbytes() / n * (n - 1));
  for (int64_t j = 0; j < n; ++j) {
    if (to_heads) {
      for (int64_t b = 0; b < B; ++b) heads_rows(out, j, b).copy_(message_rows(recv, j, b));
    } else {
      Tensor t = tokens;
      kernels::set_columns(t, block(recv, j), j * run);
    }
  }
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
