// Note [Ring attention]: causal attention over a sequence split zig-zag over n cp ranks (Note
// [Context-parallel layout]): rank r holds chunks r and 2n-1-r of length c, so its Tl = 2c
// queries, keys and values are [early half | late half]. The key/value block of rank s meets
// rank r's queries in one of three shapes:
//   s == r   causal attention of the local block (its two chunks are in sequence order)
//   s <  r   every query sees all of s's early chunk and none of its late one:
//            q[all] x kv[early half], no mask
//   s >  r   only r's late chunk sees s, all of it: q[late half] x kv[all], no mask
// so every step after the first does c x 2c work on every rank: balanced.
// Forward: step i computes on the block of rank (r - i) mod n while the block moves one hop on
// round the ring (send to r+1, receive from r-1, overlapped with the compute). Each step's
// partial output and log-sum-exp merge into f32 accumulators:
//   lse = log(e^lse_a + e^lse_b),  out = out_a e^(lse_a - lse) + out_b e^(lse_b - lse),
// which is the online softmax of FlashAttention taken across blocks (kernels::attention_merge).
// Backward (FlashAttention-2's, per block): with the final output and lse, each block's
// probabilities P = exp(S - lse) are its exact share of the softmax, D = rowsum(dO * O) is the
// whole row's, so dQ sums over blocks locally and each block's dK, dV sum over the ranks that
// saw it. The block travels the ring again, and its dK, dV accumulator travels one step behind
// it: after adding its own share a rank passes the accumulator to r+1 (overlapped with the next
// step), and after n hops every accumulator is back with the rank that owns the block.
// A block being sent is read by the compute meanwhile: sends only read their tensor (the
// contract's hands-off rule protects against writes; no backend changes a send's data).
// Traffic per rank per layer: (n-1) key/value blocks forward, (n-1) blocks and n gradient blocks
// backward (GQA blocks are NKV/NH of a query's size).
#include <cmath>
#include <utility>

#include "braid/core/error.h"
#include "braid/kernels/ops.h"
#include "braid/parallel/context/cp_group.h"

namespace braid::parallel {

using autograd::Node;
using autograd::Variable;

namespace {

constexpr int kTagKv = 1;   // a key/value block on its way round
constexpr int kTagDkv = 2;  // the gradient accumulator of a block

Tensor zeros(const Shape& shape, DType dtype, MemCategory category = MemCategory::activations) {
  Tensor t = Tensor::empty(shape, dtype, category);
  t.zero_();
  return t;
}

struct RingDims {
  int64_t B, Tl, NH, NKV, HS;
  int64_t half() const { return Tl / 2; }
};

// A [A, T, W]-shaped tensor's rows [t0, t0 + n) along its middle dimension, as a new tensor: the
// columns [t0 W, (t0 + n) W) of x viewed [A, T W], on whatever device x lives.
Tensor take_rows(const Tensor& x, int64_t A, int64_t T, int64_t t0, int64_t n, const Shape& shape) {
  Tensor out = Tensor::empty(shape, x.dtype(), MemCategory::activations);
  const int64_t W = x.numel() / (A * T);
  Tensor narrow = out.view(Shape{A, n * W});
  kernels::copy_columns(narrow, x.view(Shape{A, T * W}), t0 * W);
  return out;
}

// dst (viewed [A, T, W]) rows [t0, t0 + n) += src [A, n, W] (dtypes equal).
void add_rows(Tensor& dst, const Tensor& src, int64_t A, int64_t T, int64_t t0, int64_t n) {
  const int64_t W = src.numel() / (A * n);
  for (int64_t a = 0; a < A; ++a) {
    Tensor d = dst.flat_range((a * T + t0) * W, n * W);
    kernels::axpy(d, src.flat_range(a * n * W, n * W), 1.0f);
  }
}

// k and v in one buffer (one message per hop), and views of its halves.
Tensor pack_kv(const Tensor& k, const Tensor& v) {
  Tensor kv = Tensor::empty(Shape{2 * k.numel()}, k.dtype(), MemCategory::communication);
  kv.flat_range(0, k.numel()).copy_(k.flatten());
  kv.flat_range(k.numel(), v.numel()).copy_(v.flatten());
  return kv;
}
Tensor k_of(const Tensor& kv, const Shape& shape) {
  return kv.flat_range(0, kv.numel() / 2).view(shape);
}
Tensor v_of(const Tensor& kv, const Shape& shape) {
  return kv.flat_range(kv.numel() / 2, kv.numel() / 2).view(shape);
}

// One hop round the ring: sends `mine` to r+1 and receives into `next` from r-1.
struct Hop {
  std::shared_ptr<comm::Work> send, recv;
  size_t bytes = 0;
  void start(comm::ProcessGroup& g, const Tensor& mine, const Tensor& next, int tag) {
    const int n = g.size(), r = g.rank();
    recv = g.recv(next, (r + n - 1) % n, tag);
    send = g.send(mine, (r + 1) % n, tag);
    bytes = mine.nbytes();
  }
  void finish(CpGroup& cp) {
    if (!send) return;
    cp.wait(recv, 0);
    cp.wait(send, bytes);
    send.reset();
    recv.reset();
  }
};

class RingAttentionNode : public Node {
 public:
  RingAttentionNode(CpGroup* cp, RingDims d, Tensor out, Tensor lse)
      : cp_(cp), d_(d), out_(std::move(out)), lse_(std::move(lse)) {}
  const char* name() const override { return "ring_attention"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override;
  void release() override {
    out_ = Tensor();
    lse_ = Tensor();
  }

 private:
  CpGroup* cp_;
  RingDims d_;
  Tensor out_;  // [B, Tl, NH, HS], the output itself
  Tensor lse_;  // [B, NH, Tl] f32, the whole sequence's log-sum-exp
};

void RingAttentionNode::backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) {
  const Tensor& q = inputs[0].value();
  const Tensor& k = inputs[1].value();
  const Tensor& v = inputs[2].value();
  const RingDims& d = d_;
  const int n = cp_->size(), r = cp_->rank();
  const int64_t c = d.half();
  const Shape kvs = k.shape(), kv_half{d.B, c, d.NKV, d.HS}, q_half{d.B, c, d.NH, d.HS};
  comm::ProcessGroup& g = cp_->group();
  Tensor dq = zeros(q.shape(), q.dtype());
  // The late halves of this rank's queries, for the blocks of later ranks.
  const Tensor q2 = take_rows(q, d.B, d.Tl, c, c, q_half);
  const Tensor do2 = take_rows(dout, d.B, d.Tl, c, c, q_half);
  const Tensor o2 = take_rows(out_, d.B, d.Tl, c, c, q_half);
  const Tensor l2 = take_rows(lse_, d.B * d.NH, d.Tl, c, c, Shape{d.B, d.NH, c});
  Tensor kv = pack_kv(k, v),
         kv_next = Tensor::empty(kv.shape(), kv.dtype(), MemCategory::communication);
  Tensor dkv_in = Tensor::empty(kv.shape(), kv.dtype(), MemCategory::communication);
  Tensor dkv_out;  // the accumulator on its way to r+1
  Hop kv_hop, dkv_hop;
  for (int i = 0; i < n; ++i) {
    const int s = (r - i + n) % n;  // whose block this rank holds
    if (i + 1 < n) kv_hop.start(g, kv, kv_next, kTagKv);
    Tensor dkv = zeros(kv.shape(), kv.dtype(), MemCategory::communication);
    Tensor dk = k_of(dkv, kvs), dv = v_of(dkv, kvs);
    const Tensor kb = k_of(kv, kvs), vb = v_of(kv, kvs);
    if (s == r) {
      kernels::attention_backward(&dq, &dk, &dv, dout, q, kb, vb, out_, lse_, /*causal=*/true);
    } else if (s < r) {
      const Tensor k1 = take_rows(kb, d.B, d.Tl, 0, c, kv_half);
      const Tensor v1 = take_rows(vb, d.B, d.Tl, 0, c, kv_half);
      Tensor dk1 = zeros(kv_half, k.dtype()), dv1 = zeros(kv_half, k.dtype());
      kernels::attention_backward(&dq, &dk1, &dv1, dout, q, k1, v1, out_, lse_, false);
      add_rows(dk, dk1, d.B, d.Tl, 0, c);
      add_rows(dv, dv1, d.B, d.Tl, 0, c);
    } else {
      Tensor dq2 = zeros(q_half, q.dtype());
      kernels::attention_backward(&dq2, &dk, &dv, do2, q2, kb, vb, o2, l2, false);
      add_rows(dq, dq2, d.B, d.Tl, c, c);
    }
    // The accumulator of block s arrived from r-1 during this step's compute (none at i = 0:
    // this rank starts its own block's).
    dkv_hop.finish(*cp_);
    if (i > 0) kernels::axpy(dkv, dkv_in, 1.0f);
    dkv_out = std::move(dkv);
    dkv_hop.start(g, dkv_out, dkv_in, kTagDkv);
    kv_hop.finish(*cp_);
    if (i + 1 < n) std::swap(kv, kv_next);
  }
  dkv_hop.finish(*cp_);  // dkv_in: this rank's own block, every rank's share summed
  if (dinputs[0]) kernels::axpy(*dinputs[0], dq, 1.0f);
  if (dinputs[1]) kernels::axpy(*dinputs[1], k_of(dkv_in, kvs), 1.0f);
  if (dinputs[2]) kernels::axpy(*dinputs[2], v_of(dkv_in, kvs), 1.0f);
}

}  // namespace

Variable ring_attention(CpGroup& cp, const Variable& q, const Variable& k, const Variable& v) {
  const Shape& qs = q.shape();
  const Shape& ks = k.shape();
  BRAID_CHECK(qs.dim() == 4 && ks.dim() == 4 && ks == v.shape() && ks[0] == qs[0] &&
                  ks[1] == qs[1] && ks[3] == qs[3] && qs[1] % 2 == 0,
              "ring attention: q ", qs.str(), ", k ", ks.str(), ", v ", v.shape().str(),
              " do not match (need q[B,Tl,NH,HS], k and v [B,Tl,NKV,HS], Tl even)");
  const RingDims d{qs[0], qs[1], qs[2], ks[2], qs[3]};
  const int n = cp.size(), r = cp.rank();
  const int64_t c = d.half();
  const Shape kv_half{d.B, c, d.NKV, d.HS}, q_half{d.B, c, d.NH, d.HS};
  comm::ProcessGroup& g = cp.group();
  Tensor out_acc = zeros(qs, DType::f32);
  Tensor lse_acc = zeros(Shape{d.B, d.NH, d.Tl}, DType::f32);
  lse_acc.fill_(-INFINITY);
  const Tensor q2 = take_rows(q.value(), d.B, d.Tl, c, c, q_half);
  Tensor kv = pack_kv(k.value(), v.value());
  Tensor kv_next = Tensor::empty(kv.shape(), kv.dtype(), MemCategory::communication);
  Hop hop;
  for (int i = 0; i < n; ++i) {
    const int s = (r - i + n) % n;
    if (i + 1 < n) hop.start(g, kv, kv_next, kTagKv);
    const Tensor kb = k_of(kv, ks), vb = v_of(kv, ks);
    if (s == r) {
      Tensor o = Tensor::empty(qs, q.value().dtype(), MemCategory::activations);
      Tensor l = Tensor::empty(Shape{d.B, d.NH, d.Tl}, DType::f32, MemCategory::activations);
      kernels::attention_forward(o, l, q.value(), kb, vb, /*causal=*/true);
      kernels::attention_merge(out_acc, lse_acc, o, l, 0);
    } else if (s < r) {
      const Tensor k1 = take_rows(kb, d.B, d.Tl, 0, c, kv_half);
      const Tensor v1 = take_rows(vb, d.B, d.Tl, 0, c, kv_half);
      Tensor o = Tensor::empty(qs, q.value().dtype(), MemCategory::activations);
      Tensor l = Tensor::empty(Shape{d.B, d.NH, d.Tl}, DType::f32, MemCategory::activations);
      kernels::attention_forward(o, l, q.value(), k1, v1, false);
      kernels::attention_merge(out_acc, lse_acc, o, l, 0);
    } else {
      Tensor o = Tensor::empty(q_half, q.value().dtype(), MemCategory::activations);
      Tensor l = Tensor::empty(Shape{d.B, d.NH, c}, DType::f32, MemCategory::activations);
      kernels::attention_forward(o, l, q2, kb, vb, false);
      kernels::attention_merge(out_acc, lse_acc, o, l, c);
    }
    hop.finish(cp);
    if (i + 1 < n) std::swap(kv, kv_next);
  }
  Tensor out = Tensor::empty(qs, q.value().dtype(), MemCategory::activations);
  out.copy_(out_acc);
  const bool record =
      autograd::grad_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  if (!record) return Variable(std::move(out));
  auto node = std::make_shared<RingAttentionNode>(&cp, d, out, std::move(lse_acc));
  node->inputs = {q, k, v};
  return Variable::from_node(std::move(out), std::move(node));
}

}  // namespace braid::parallel
