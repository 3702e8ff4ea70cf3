// The GEMM-backed functions: linear, embedding, attention, lm_head_cross_entropy.
#include "braid/autograd/function_util.h"
#include "braid/autograd/functions.h"
#include "braid/core/tensor_pool.h"
#include "braid/kernels/device.h"
#include "braid/kernels/ops.h"

namespace braid::autograd {

using namespace detail;

namespace {

// x[N,C] (any leading dims), w[OC,C], b[OC] (optional)
class LinearNode : public Node {
 public:
  const char* name() const override { return "linear"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    run(dout, dinputs, /*set_dx=*/false);
  }
  // dx = dout @ w into a new buffer: the GEMM with beta 0 (the same product, no zeros read).
  bool sets_fresh_grad(size_t i) const override { return i == 0; }
  void backward_fresh(const Tensor& dout, const std::vector<Tensor*>& dinputs,
                      const std::vector<bool>& fresh) override {
    run(dout, dinputs, fresh[0]);
  }

 private:
  void run(const Tensor& dout, const std::vector<Tensor*>& dinputs, bool set_dx) {
    const Tensor& x = inputs[0].value();
    const Tensor& w = inputs[1].value();
    const Shape xs = rows(x.shape());
    const Tensor g = dout.view(Shape{xs[0], w.size(0)});
    Tensor* db = dinputs.size() > 2 ? dinputs[2] : nullptr;
    if (set_dx) {
      Tensor dx = dinputs[0]->view(xs);
      kernels::matmul(dx, g, w, false, false, 1.0f, 0.0f);
      if (dinputs[1] || db) kernels::linear_backward(nullptr, dinputs[1], db, g, x.view(xs), w);
      return;
    }
    Tensor dx = view_or_empty(dinputs[0], xs);
    kernels::linear_backward(ptr(dx), dinputs[1], db, g, x.view(xs), w);
  }
};

class EmbeddingNode : public Node {
 public:
  explicit EmbeddingNode(Tensor ids) : ids_(std::move(ids)) {}
  const char* name() const override { return "embedding"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    kernels::embedding_backward(dinputs[0], dinputs[1], dout, ids_);
  }
  void release() override { ids_ = Tensor(); }

 private:
  Tensor ids_;  // [B,T] i32
};

class EmbeddingSliceNode : public Node {
 public:
  EmbeddingSliceNode(Tensor ids, int64_t v0) : ids_(std::move(ids)), v0_(v0) {}
  const char* name() const override { return "embedding_slice"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    if (dinputs[0]) kernels::embedding_slice_backward(*dinputs[0], dout, ids_, v0_);
  }
  void release() override { ids_ = Tensor(); }

 private:
  Tensor ids_;  // [B,T] i32
  int64_t v0_;
};

class AttentionNode : public Node {
 public:
  AttentionNode(Tensor out, Tensor lse) : out_(std::move(out)), lse_(std::move(lse)) {}
  const char* name() const override { return "attention"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    kernels::attention_backward(dinputs[0], dinputs[1], dinputs[2], dout, inputs[0].value(),
                                inputs[1].value(), inputs[2].value(), out_, lse_);
  }
  void release() override {
    out_ = Tensor();
    lse_ = Tensor();
  }

 private:
  Tensor out_;  // [B,T,NH,HS], the output itself
  Tensor lse_;  // [B,NH,T] f32
};

// attention_qkv's node: the gradient of the packed projection, written whole (set into a fresh
// buffer, else added).
class PackedAttentionNode : public Node {
 public:
  PackedAttentionNode(Tensor out, Tensor lse, int64_t n_head, int64_t n_kv_head)
      : out_(std::move(out)), lse_(std::move(lse)), n_head_(n_head), n_kv_head_(n_kv_head) {}
  const char* name() const override { return "attention"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    backward_fresh(dout, dinputs, {false});
  }
  bool sets_fresh_grad(size_t) const override { return true; }
  void backward_fresh(const Tensor& dout, const std::vector<Tensor*>& dinputs,
                      const std::vector<bool>& fresh) override {
    if (!dinputs[0]) return;
    kernels::attention_backward_qkv(*dinputs[0], dout, inputs[0].value(), out_, lse_, n_head_,
                                    n_kv_head_, /*accumulate=*/!fresh[0]);
  }
  void release() override {
    out_ = Tensor();
    lse_ = Tensor();
  }

 private:
  Tensor out_;  // [B,T,NH,HS]
  Tensor lse_;  // [B,NH,T] f32
  int64_t n_head_, n_kv_head_;
};

// attention over segments: each segment is the causal attention of its positions alone, run
// through the same kernels on views of q, k, v, out and the gradients (a segment's rows of a
// [B, T, H, HS] tensor are contiguous), with the segment's own lse.
class SegmentAttentionNode : public Node {
 public:
  SegmentAttentionNode(Tensor out, std::vector<Tensor> lse, std::vector<Segment> segments)
      : out_(std::move(out)), lse_(std::move(lse)), segments_(std::move(segments)) {}
  const char* name() const override { return "attention"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    const Tensor &q = inputs[0].value(), &k = inputs[1].value(), &v = inputs[2].value();
    for (size_t i = 0; i < segments_.size(); ++i) {
      const Segment& s = segments_[i];
      Tensor dq = dinputs[0] ? part(*dinputs[0], s) : Tensor();
      Tensor dk = dinputs[1] ? part(*dinputs[1], s) : Tensor();
      Tensor dv = dinputs[2] ? part(*dinputs[2], s) : Tensor();
      kernels::attention_backward(dinputs[0] ? &dq : nullptr, dinputs[1] ? &dk : nullptr,
                                  dinputs[2] ? &dv : nullptr, part(dout, s), part(q, s), part(k, s),
                                  part(v, s), part(out_, s), lse_[i]);
    }
  }
  void release() override {
    out_ = Tensor();
    lse_.clear();
  }
  // Segment s of t[B, T, H, HS]: [1, end - begin, H, HS], sharing t's data.
  static Tensor part(const Tensor& t, const Segment& s) {
    const Shape& sh = t.shape();
    const int64_t row = sh[2] * sh[3];
    return t.flat_range((s.row * sh[1] + s.begin) * row, (s.end - s.begin) * row)
        .view(Shape{1, s.end - s.begin, sh[2], sh[3]});
  }

 private:
  Tensor out_;
  std::vector<Tensor> lse_;  // per segment [1, NH, end - begin] f32
  std::vector<Segment> segments_;
};

// Note [Fused LM head]: the forward also takes the gradients, for a loss of scale 1 (dx_unit in
// x's dtype, dw_unit in f32), and the backward only scales them into the inputs' gradients: the
// backward's recompute of the logits (a quarter of the LM head's GEMM work) is saved for 4 V C
// bytes of f32 held from forward to backward. On a GPU always; on the CPU while those bytes are
// at most kFusedLmHeadHostBytes (GPT-2's 154 MB; LLaMA 3's 2.1 GB would rather recompute):
// bench-small's fp32 step took 1045 ms recomputing, the head's forward and backward 74.6 + 193.0
// ms against 199.3 fused (kernels_bench, 2-core AMD EPYC, 2026-11-27). The activation estimate
// counts what is held (Note [Fused LM head] in parallel/estimate/activation_estimate.cpp).
// The f32 weight gradient is reused from step to step (Note [Recycled tensors], tensor_pool.h):
// a fresh one was a zeroed 154-322 MB mapping every micro-batch. At most two wait, per thread,
// until release_lm_head_buffers() (Trainer::run calls it at its end) or the thread ends.
TensorPool& lm_head_gradients() {
  thread_local TensorPool pool(2);
  return pool;
}

}  // namespace

size_t lm_head_buffers_kept() {
  return lm_head_gradients().kept();
}

void release_lm_head_buffers() {
  lm_head_gradients().clear();
}

namespace {

class LmHeadCrossEntropyNode : public Node {
 public:
  LmHeadCrossEntropyNode(Tensor targets, Tensor lse, double denominator, int32_t ignore_index,
                         Tensor dx_unit, Tensor dw_unit)
      : targets_(std::move(targets)),
        lse_(std::move(lse)),
        dx_unit_(std::move(dx_unit)),
        dw_unit_(std::move(dw_unit)),
        denominator_(denominator),
        ignore_index_(ignore_index) {}
  const char* name() const override { return "lm_head_cross_entropy"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    if (denominator_ == 0) return;  // no counted target: the loss is the constant 0
    const Tensor& x = inputs[0].value();
    Shape xs = rows(x.shape());
    Tensor dx = view_or_empty(dinputs[0], xs);
    auto scale = static_cast<float>(dout.item() / denominator_);
    if (dw_unit_.defined()) {  // Note [Fused LM head]
      if (dx.defined()) kernels::axpy(dx, dx_unit_, scale);
      if (dinputs[1]) kernels::axpy(*dinputs[1], dw_unit_, scale);
      return;
    }
    kernels::lm_head_ce_backward(ptr(dx), dinputs[1], x.view(xs), inputs[1].value(),
                                 targets_.flatten(), lse_, scale, ignore_index_);
  }
  void release() override {
    targets_ = Tensor();
    lse_ = Tensor();
    dx_unit_ = Tensor();
    lm_head_gradients().give(std::move(dw_unit_));
  }

 private:
  Tensor targets_;  // [N] i32
  Tensor lse_;      // [N] f32
  Tensor dx_unit_;  // fused (on a device): dL/dx for a loss of scale 1, [N, C]
  Tensor dw_unit_;  // fused: dL/dw for a loss of scale 1, [V, C] f32
  double denominator_;
  int32_t ignore_index_;
};

}  // namespace

Variable linear(const Variable& x, const Variable& w, const Variable& b) {
  const char* fn = "linear";
  check_defined(fn, "x", x);
  check_defined(fn, "w", w);
  BRAID_CHECK(w.shape().dim() == 2 && x.shape().dim() >= 1 && x.shape()[-1] == w.shape()[1],
              "linear: x ", x.shape().str(), " and w ", w.shape().str(),
              " do not match (need x[..., C] and w[OC, C])");
  check_same_dtype(fn, "w", w, "x", x);
  if (b.defined()) {
    BRAID_CHECK(b.shape() == Shape{w.shape()[0]}, "linear: bias ", b.shape().str(),
                " does not match w ", w.shape().str(), " (need b[OC])");
    check_same_dtype(fn, "b", b, "x", x);
  }
  Shape xs = rows(x.shape());
  Tensor out = activation(with_last(x.shape(), w.shape()[0]), x.value().dtype());
  Tensor out2 = out.view(Shape{xs[0], w.shape()[0]});
  kernels::linear_forward(out2, x.value().view(xs), w.value(), b.defined() ? &b.value() : nullptr);
  return result(out, should_record({&x, &w, &b}), std::make_shared<LinearNode>(), {x, w, b});
}

Variable embedding(const Tensor& ids, const Variable& wte, const Variable& wpe) {
  const char* fn = "embedding";
  check_defined(fn, "wte", wte);
  BRAID_CHECK(ids.defined() && ids.dim() == 2 && ids.dtype() == DType::i32,
              "embedding: ids must be [B, T] i32, got ",
              ids.defined() ? ids.shape().str() : "(undefined)");
  BRAID_CHECK(wte.shape().dim() == 2, "embedding: wte must be [V, C], got ", wte.shape().str());
  const int64_t C = wte.shape()[1];
  if (wpe.defined()) {
    BRAID_CHECK(wpe.shape().dim() == 2 && wpe.shape()[1] == C && wpe.shape()[0] >= ids.size(1),
                "embedding: wpe ", wpe.shape().str(), " does not fit wte ", wte.shape().str(),
                " and ids ", ids.shape().str(), " (need wpe[maxT >= T, C])");
    check_same_dtype(fn, "wpe", wpe, "wte", wte);
  }
  Tensor out = activation(Shape{ids.size(0), ids.size(1), C}, wte.value().dtype());
  kernels::embedding_forward(out, ids, wte.value(), wpe.defined() ? &wpe.value() : nullptr);
  return result(out, should_record({&wte, &wpe}), std::make_shared<EmbeddingNode>(ids), {wte, wpe});
}

Variable embedding_slice(const Tensor& ids, const Variable& wte, int64_t v0) {
  check_defined("embedding_slice", "wte", wte);
  BRAID_CHECK(ids.defined() && ids.dim() == 2 && ids.dtype() == DType::i32,
              "embedding_slice: ids must be [B, T] i32, got ",
              ids.defined() ? ids.shape().str() : "(undefined)");
  BRAID_CHECK(wte.shape().dim() == 2 && v0 >= 0,
              "embedding_slice: wte must be [Vl, C] and v0 >= 0, got ", wte.shape().str(), " and ",
              v0);
  Tensor out = activation(Shape{ids.size(0), ids.size(1), wte.shape()[1]}, wte.value().dtype());
  kernels::embedding_slice_forward(out, ids, wte.value(), v0);
  return result(out, should_record({&wte}), std::make_shared<EmbeddingSliceNode>(ids, v0), {wte});
}

Variable attention(const Variable& q, const Variable& k, const Variable& v) {
  const char* fn = "attention";
  check_defined(fn, "q", q);
  check_defined(fn, "k", k);
  check_defined(fn, "v", v);
  const Shape& qs = q.shape();
  const Shape& ks = k.shape();
  BRAID_CHECK(qs.dim() == 4 && ks.dim() == 4 && k.shape() == v.shape() && ks[0] == qs[0] &&
                  ks[1] == qs[1] && ks[3] == qs[3] && ks[2] > 0 && qs[2] % ks[2] == 0,
              "attention: q ", qs.str(), ", k ", ks.str(), ", v ", v.shape().str(),
              " do not match (need q[B,T,NH,HS], k and v [B,T,NKV,HS], NH % NKV == 0)");
  check_same_dtype(fn, "k", k, "q", q);
  check_same_dtype(fn, "v", v, "q", q);
  Tensor out = activation(qs, q.value().dtype());
  Tensor lse = activation(Shape{qs[0], qs[2], qs[1]}, DType::f32);
  kernels::attention_forward(out, lse, q.value(), k.value(), v.value());
  bool record = should_record({&q, &k, &v});
  if (!record) lse = Tensor();
  return result(out, record, std::make_shared<AttentionNode>(out, lse), {q, k, v});
}

Variable attention_qkv(const Variable& qkv, int64_t n_head, int64_t n_kv_head) {
  const char* fn = "attention_qkv";
  check_defined(fn, "qkv", qkv);
  const Shape& s = qkv.shape();
  const int64_t heads = n_head + 2 * n_kv_head;
  BRAID_CHECK(
      s.dim() == 3 && n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0 && s[2] % heads == 0,
      "attention_qkv: qkv ", s.str(), " is not [B,T,(NH+2NKV)*HS] for NH=", n_head,
      ", NKV=", n_kv_head);
  const Shape os{s[0], s[1], n_head, s[2] / heads};
  Tensor out = activation(os, qkv.value().dtype());
  Tensor lse = activation(Shape{s[0], n_head, s[1]}, DType::f32);
  kernels::attention_forward_qkv(out, lse, qkv.value(), n_head, n_kv_head);
  bool record = should_record({&qkv});
  if (!record) lse = Tensor();
  return result(out, record, std::make_shared<PackedAttentionNode>(out, lse, n_head, n_kv_head),
                {qkv});
}

Variable attention(const Variable& q, const Variable& k, const Variable& v,
                   const std::vector<Segment>& segments) {
  const Shape& qs = q.shape();
  BRAID_CHECK(
      qs.dim() == 4 && k.shape().dim() == 4 && k.shape()[1] == qs[1] && k.shape()[0] == qs[0],
      "attention: q ", qs.str(), " and k ", k.shape().str(), " do not match");
  std::vector<int64_t> covered(static_cast<size_t>(qs[0]), 0);
  for (const Segment& s : segments) {
    BRAID_CHECK(s.row >= 0 && s.row < qs[0] && s.begin == covered[static_cast<size_t>(s.row)] &&
                    s.end > s.begin && s.end <= qs[1],
                "attention: segment [", s.begin, ", ", s.end, ") of row ", s.row,
                " does not continue its row's segments (rows of ", qs[1], " positions)");
    covered[static_cast<size_t>(s.row)] = s.end;
  }
  for (int64_t r = 0; r < qs[0]; ++r)
    BRAID_CHECK(covered[static_cast<size_t>(r)] == qs[1], "attention: the segments of row ", r,
                " cover ", covered[static_cast<size_t>(r)], " of its ", qs[1], " positions");
  Tensor out = activation(qs, q.value().dtype());
  std::vector<Tensor> lse;
  for (const Segment& s : segments) {
    Tensor o = SegmentAttentionNode::part(out, s);
    lse.push_back(activation(Shape{1, qs[2], s.end - s.begin}, DType::f32));
    kernels::attention_forward(o, lse.back(), SegmentAttentionNode::part(q.value(), s),
                               SegmentAttentionNode::part(k.value(), s),
                               SegmentAttentionNode::part(v.value(), s));
  }
  bool record = should_record({&q, &k, &v});
  if (!record) lse.clear();
  return result(out, record, std::make_shared<SegmentAttentionNode>(out, std::move(lse), segments),
                {q, k, v});
}

namespace {
thread_local bool t_recompute_lm_head = false;
}  // namespace

RecomputeLmHead::RecomputeLmHead(bool on) : previous_(t_recompute_lm_head) {
  t_recompute_lm_head = previous_ || on;
}
RecomputeLmHead::~RecomputeLmHead() {
  t_recompute_lm_head = previous_;
}

bool fused_lm_head(int64_t vocab, int64_t channels, bool on_device) {
  return on_device || (!t_recompute_lm_head && lm_head_fits_fused_on_host(vocab, channels));
}

Variable lm_head_cross_entropy(const Variable& x, const Variable& w, const Tensor& targets,
                               double denominator, int32_t ignore_index) {
  const char* fn = "lm_head_cross_entropy";
  check_defined(fn, "x", x);
  check_defined(fn, "w", w);
  BRAID_CHECK(w.shape().dim() == 2 && x.shape().dim() >= 1 && x.shape()[-1] == w.shape()[1],
              "lm_head_cross_entropy: x ", x.shape().str(), " and w ", w.shape().str(),
              " do not match (need x[..., C] and w[V, C])");
  check_same_dtype(fn, "w", w, "x", x);
  Shape xs = rows(x.shape());
  BRAID_CHECK(targets.defined() && targets.dtype() == DType::i32 && targets.numel() == xs[0],
              "lm_head_cross_entropy: targets must be i32 with one entry per row of x ",
              x.shape().str(), " (", xs[0], "), got ",
              targets.defined() ? targets.shape().str() : "(undefined)");
  BRAID_CHECK(denominator >= 0, "lm_head_cross_entropy: denominator must be >= 0, got ",
              denominator);
  Tensor lse = activation(Shape{xs[0]}, DType::f32);
  int64_t count = 0;
  const bool record = should_record({&x, &w});
  Tensor dx_unit, dw_unit;
  double sum;
  const bool on_device = kernels::on_device({&x.value()});
  if (record && fused_lm_head(w.shape()[0], w.shape()[1], on_device)) {  // Note [Fused LM head]
    dx_unit = activation(xs, x.value().dtype());
    dx_unit.zero_();
    dw_unit = lm_head_gradients().take(w.shape(), DType::f32, MemCategory::activations);
    dw_unit.zero_();
    sum = kernels::lm_head_ce_forward_backward(lse, &count, &dx_unit, &dw_unit, x.value().view(xs),
                                               w.value(), targets.flatten(), 1.0f, ignore_index);
  } else {
    sum = kernels::lm_head_ce_forward(lse, &count, x.value().view(xs), w.value(), targets.flatten(),
                                      ignore_index);
  }
  // Note [Empty loss]: with no counted target and no explicit denominator the loss is 0 with
  // zero gradients (a micro-batch of padding contributes nothing), not torch's 0/0 = nan.
  double denom = denominator > 0 ? denominator : static_cast<double>(count);
  Tensor out = activation(Shape{1}, DType::f32);
  out.fill_(denom > 0 ? static_cast<float>(sum / denom) : 0.0f);  // on the model's device
  if (!record) lse = Tensor();
  return result(
      out, record,
      std::make_shared<LmHeadCrossEntropyNode>(targets, lse, denom, ignore_index, dx_unit, dw_unit),
      {x, w});
}

}  // namespace braid::autograd
