// Differentiable functions: each runs its forward kernel (kernels/ops.h) and, when any input
// requires grad and grad mode is on, records a Node whose backward runs the matching backward
// kernel. Shapes use the letters of kernels/ops.h. Activations are charged to the
// `activations` memory category and freed when their Node has run backward.
#pragma once

#include <functional>
#include <vector>

#include "braid/autograd/variable.h"

namespace braid::autograd {

// x[..., C] @ w[OC, C]^T + b[OC]  -> [..., OC]   (b may be undefined)
Variable linear(const Variable& x, const Variable& w, const Variable& b);
// ids[B,T] i32 (a plain tensor, no gradient) -> wte[ids] (+ wpe[t]) : [B,T,C]
Variable embedding(const Tensor& ids, const Variable& wte, const Variable& wpe);
// ids[B,T] global ids; wte[Vl,C] rows [v0, v0+Vl) of a vocabulary-parallel table -> [B,T,C]
// with zero rows for ids outside the slice (tensor parallelism sums the ranks' outputs).
Variable embedding_slice(const Tensor& ids, const Variable& wte, int64_t v0);
Variable layernorm(const Variable& x, const Variable& w, const Variable& b, float eps);
Variable rmsnorm(const Variable& x, const Variable& w, float eps);
Variable gelu(const Variable& x);
Variable swiglu(const Variable& gate, const Variable& up);
// x[B,T,NH,HS]
// positions: i32 [T], each token's position (undefined: 0..T-1).
Variable rope(const Variable& x, float theta, const Tensor& positions = Tensor());
// Causal attention: q[B,T,NH,HS], k/v[B,T,NKV,HS] -> [B,T,NH,HS]
Variable attention(const Variable& q, const Variable& k, const Variable& v);
// Causal attention over a packed projection qkv[B,T,(NH + 2 NKV) HS] (each row q | k | v, GPT-2's
// fused projection) -> [B,T,NH,HS]: attention(q, k, v) on its column slices, bit for bit,
// without the slices' copies (Note [Packed qkv], kernels/cpu/attention.cpp). Host tensors only.
Variable attention_qkv(const Variable& qkv, int64_t n_head, int64_t n_kv_head);
// Positions [begin, end) of row `row` of a batch: one example of a packed row.
struct Segment {
  int64_t row, begin, end;
};
// Causal attention within each segment only (Note [Packed rows], nn/sequence_layout.h): the
// segments cover every position of every row once; a query sees the keys of its own segment up
// to itself, so each segment's output is exactly that of the example run alone.
Variable attention(const Variable& q, const Variable& k, const Variable& v,
                   const std::vector<Segment>& segments);
// Summed cross-entropy of the LM head divided by `denominator` (default: the number of
// counted targets, i.e. the mean). Passing the global token count makes data-parallel and
// accumulated micro-batches average exactly like one big batch. Returns a scalar [1].
Variable lm_head_cross_entropy(const Variable& x, const Variable& w, const Tensor& targets,
                               double denominator = 0.0, int32_t ignore_index = -100);
// Note [Fused LM head]: whether the head's forward also takes the gradients (held to backward:
// 4 V C bytes of f32 for the weight's, the input's in its dtype) instead of the backward
// recomputing the logits: on a device always, on the host while the weight's f32 gradient is
// at most kFusedLmHeadHostBytes and no RecomputeLmHead is in scope on this thread.
inline constexpr int64_t kFusedLmHeadHostBytes = int64_t{256} << 20;
bool fused_lm_head(int64_t vocab, int64_t channels, bool on_device);
// The f32 weight gradients this thread's fused heads keep for the next step (Note [Recycled
// tensors]): how many wait, and freeing them, which a long-lived process does when it stops
// training (Trainer::run does at its end). The next fused head allocates afresh.
size_t lm_head_buffers_kept();
void release_lm_head_buffers();
// The host's size rule alone, whatever scope this thread is in (the memory estimator's question).
inline bool lm_head_fits_fused_on_host(int64_t vocab, int64_t channels) {
  return 4 * vocab * channels <= kFusedLmHeadHostBytes;
}
// Heads built on this thread in its scope recompute on the host: a split backward (zero-bubble
// pipeline schedules) keeps the head's node until its weight pass, so a fused head would hold
// its gradients for every micro-batch between B and W.
class RecomputeLmHead {
 public:
  explicit RecomputeLmHead(bool on);
  ~RecomputeLmHead();
  RecomputeLmHead(const RecomputeLmHead&) = delete;
  RecomputeLmHead& operator=(const RecomputeLmHead&) = delete;

 private:
  bool previous_;
};
Variable add(const Variable& a, const Variable& b);
// x[..., C] + b[C]
Variable bias_add(const Variable& x, const Variable& b);
Variable reshape(const Variable& x, const Shape& shape);  // a view; no copy
// out[..., W] = x[..., start:start+W] over the last dimension
Variable slice_last_dim(const Variable& x, int64_t start, int64_t width);
Variable scale(const Variable& x, float alpha);
// x in another float dtype (f32, bf16, f16; rounding to nearest even); the gradient comes back
// in x's dtype.
Variable cast(const Variable& x, DType dtype);

// Identity whose backward first calls on_backward() (module backward hooks; FSDP gathers).
Variable backward_hook(const Variable& x, std::function<void()> on_backward);

// Activation checkpointing: runs fn(x) without recording; in backward reruns fn(x) with
// recording on and backpropagates through the rerun. Parameters used inside fn receive their
// gradients (and fire their hooks) during that inner backward.
Variable checkpoint(const std::function<Variable(const Variable&)>& fn, const Variable& x);

}  // namespace braid::autograd
