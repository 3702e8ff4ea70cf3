#include "braid/parallel/tensor/tp_group.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "braid/autograd/functions.h"
#include "braid/core/error.h"
#include "braid/kernels/ops.h"

namespace braid::parallel {

using autograd::Node;
using autograd::Variable;

namespace {

Tensor like(const Shape& shape, DType dtype) {
  return Tensor::empty(shape, dtype, MemCategory::activations);
}

// Note [Vocabulary-parallel statistics on the host]: the vocabulary-parallel loss merges its
// per-row statistics (max, sum of exponentials, target logit: a few floats per row) on the host,
// so a rank on a device copies them there (and the merged log-sum-exp and loss back) rather than
// reading device memory; the merge's arithmetic is the CPU's whatever the device, so a device
// run gives the CPU run's bits. The partial forward and backward over the vocabulary shard (the
// [rows, vocabulary / tp] work) stay kernels on the device.
Tensor on_host(const Tensor& t) {
  return t.device().is_cpu() ? t : t.to(Device::cpu());
}

Tensor on_device(const Tensor& host, Device device) {
  return device.is_cpu() ? host : host.to(device);
}

Tensor copy_of(const Tensor& t, MemCategory category) {
  Tensor out = Tensor::empty(t.shape(), t.dtype(), category);
  out.copy_(t);
  return out;
}

// Note [Bus bytes]: TpCommStats counts what each rank sends in a ring implementation (the bus
// bandwidth convention of nccl-tests): an all-reduce 2(n-1)/n of the tensor, an all-gather or
// reduce-scatter (n-1)/n of the whole (gathered) tensor. So an all-reduce costs what the
// reduce-scatter + all-gather that sequence parallelism puts in its place cost.
size_t ring(size_t whole, int n) {
  return whole * static_cast<size_t>(n - 1) / static_cast<size_t>(n);
}

// [..., C] as rows [N, C]
Shape rows(const Shape& s) {
  const int64_t c = s[-1];
  return Shape{s.numel() / c, c};
}

Shape rows_times(const Shape& s, int64_t num, int64_t den) {
  const Shape r = rows(s);
  return Shape{r[0] * num / den, r[1]};
}

Variable record(Tensor out, const Variable& input, std::shared_ptr<Node> node) {
  if (!autograd::grad_enabled() || !input.requires_grad()) return Variable(std::move(out));
  node->inputs = {input};
  return Variable::from_node(std::move(out), std::move(node));
}

// Base of the tp nodes: they keep the group alive through the TpGroup's owner (the strategy
// outlives every graph built on its model).
class TpNode : public Node {
 public:
  explicit TpNode(TpGroup* tp) : tp_(tp) {}

 protected:
  TpGroup* tp_;
};

// g: all-reduce forward, identity backward.
class ReduceFromNode : public TpNode {
 public:
  using TpNode::TpNode;
  const char* name() const override { return "tp_exit"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    if (dinputs[0]) kernels::axpy(*dinputs[0], dout, 1.0f);
  }
};

// Sequence parallel enter: all-gather rows forward, reduce-scatter backward.
class GatherRowsNode : public TpNode {
 public:
  using TpNode::TpNode;
  const char* name() const override { return "tp_gather_rows"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    Tensor mine = Tensor::empty(rows_times(dout.shape(), 1, tp_->size()), dout.dtype(),
                                MemCategory::communication);
    tp_->run(tp_->group().reduce_scatter(mine, dout.flatten()), ring(dout.nbytes(), tp_->size()));
    if (dinputs[0]) kernels::axpy(*dinputs[0], mine, 1.0f);
  }
};

// Sequence parallel exit: reduce-scatter forward, all-gather backward.
class ReduceScatterRowsNode : public TpNode {
 public:
  using TpNode::TpNode;
  const char* name() const override { return "tp_reduce_scatter_rows"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    Tensor all = Tensor::empty(rows_times(dout.shape(), tp_->size(), 1), dout.dtype(),
                               MemCategory::communication);
    tp_->run(tp_->group().all_gather(all, dout.flatten()), ring(all.nbytes(), tp_->size()));
    if (dinputs[0]) kernels::axpy(*dinputs[0], all, 1.0f);
  }
};

// Identity forward; the gradient is all-reduced over `group`: f (enter without sequence
// parallelism) over the tp group, sum_grad over the ranks sharing a parameter.
class SumGradNode : public TpNode {
 public:
  SumGradNode(TpGroup* tp, comm::ProcessGroup* group, const char* name)
      : TpNode(tp), group_(group), name_(name) {}
  const char* name() const override { return name_; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    Tensor g = copy_of(dout, MemCategory::communication);
    tp_->run(group_->all_reduce(g), 2 * ring(g.nbytes(), group_->size()));
    if (dinputs[0]) kernels::axpy(*dinputs[0], g, 1.0f);
  }

 private:
  comm::ProcessGroup* group_;
  const char* name_;
};

class VocabParallelCeNode : public TpNode {
 public:
  VocabParallelCeNode(TpGroup* tp, Tensor targets, Tensor lse, double denominator,
                      int32_t ignore_index, int64_t v0, int64_t valid)
      : TpNode(tp),
        targets_(std::move(targets)),
        lse_(std::move(lse)),
        denominator_(denominator),
        ignore_index_(ignore_index),
        v0_(v0),
        valid_(valid) {}
  const char* name() const override { return "vocab_parallel_cross_entropy"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) override {
    if (denominator_ == 0) return;  // no counted target (Note [Empty loss])
    const Tensor& x = inputs[0].value();
    Tensor dx = dinputs[0] ? dinputs[0]->view(rows(x.shape())) : Tensor();
    const auto scale = static_cast<float>(dout.item() / denominator_);
    kernels::lm_head_ce_partial_backward(dx.defined() ? &dx : nullptr, dinputs[1],
                                         x.view(rows(x.shape())), inputs[1].value(), targets_, lse_,
                                         scale, v0_, valid_, ignore_index_);
  }
  void release() override {
    targets_ = Tensor();
    lse_ = Tensor();
  }

 private:
  Tensor targets_, lse_;
  double denominator_;
  int32_t ignore_index_;
  int64_t v0_, valid_;
};

}  // namespace

TpGroup::TpGroup(std::shared_ptr<comm::ProcessGroup> group, bool sequence_parallel)
    : group_(std::move(group)), sequence_parallel_(sequence_parallel) {
  BRAID_CHECK(group_ != nullptr, "TpGroup: no group");
}

std::string TpGroup::describe() const {
  return "tp=" + std::to_string(size()) + (sequence_parallel_ ? ", sequence parallel" : "");
}

void TpGroup::run(const std::shared_ptr<comm::Work>& work, size_t bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  work->wait();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard lock(mu_);
  ++stats_.collectives;
  stats_.bytes += static_cast<int64_t>(bytes);
  stats_.wait_ms += ms;
}

TpCommStats TpGroup::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void TpGroup::reset_stats() {
  std::lock_guard lock(mu_);
  stats_ = {};
}

comm::ProcessGroup& TpGroup::replica_group(int replicas) {
  if (replicas <= 0 || replicas == size()) return *group_;
  auto it = replica_groups_.find(replicas);
  if (it == replica_groups_.end()) {
    BRAID_CHECK(size() % replicas == 0, "TpGroup: ", replicas, " replicas over tp=", size());
    const int color = rank() / replicas;
    it = replica_groups_
             .emplace(replicas, group_->split(color, rank(),
                                              group_->name() + "/replicas" + std::to_string(color)))
             .first;
  }
  return *it->second;
}

Variable TpGroup::enter(const Variable& x) {
  if (!sequence_parallel_)
    return record(x.value(), x, std::make_shared<SumGradNode>(this, group_.get(), "tp_enter"));
  Tensor all = like(rows_times(x.shape(), size(), 1), x.value().dtype());
  run(group_->all_gather(all, x.value().flatten()), ring(all.nbytes(), size()));
  return record(all, x, std::make_shared<GatherRowsNode>(this));
}

Variable TpGroup::exit(const Variable& x) {
  if (!sequence_parallel_) {
    Tensor sum = copy_of(x.value(), MemCategory::activations);
    run(group_->all_reduce(sum), 2 * ring(sum.nbytes(), size()));
    return record(sum, x, std::make_shared<ReduceFromNode>(this));
  }
  BRAID_CHECK(rows(x.shape())[0] % size() == 0, "sequence parallelism: ", rows(x.shape())[0],
              " rows do not split over tp=", size());
  Tensor mine = like(rows_times(x.shape(), 1, size()), x.value().dtype());
  run(group_->reduce_scatter(mine, x.value().flatten()), ring(x.value().nbytes(), size()));
  return record(mine, x, std::make_shared<ReduceScatterRowsNode>(this));
}

Variable TpGroup::sum_grad(const Variable& w, int replicas) {
  comm::ProcessGroup* g = &replica_group(replicas);
  return record(w.value(), w, std::make_shared<SumGradNode>(this, g, "tp_sum_grad"));
}

Variable TpGroup::vocab_parallel_cross_entropy(const Variable& x, const Variable& w,
                                               const Tensor& targets, double denominator,
                                               int32_t ignore_index, int64_t v0, int64_t valid) {
  const Shape xs = rows(x.shape());
  const int64_t N = xs[0];
  BRAID_CHECK(targets.numel() == N && targets.dtype() == DType::i32,
              "vocab_parallel_cross_entropy: targets must be i32 with one entry per row of x ",
              x.shape().str());
  BRAID_CHECK(denominator >= 0, "vocab_parallel_cross_entropy: denominator must be >= 0");
  const Tensor tg = targets.flatten();
  Tensor row_max = like(Shape{N}, DType::f32), sumexp = like(Shape{N}, DType::f32);
  Tensor both = Tensor::empty(Shape{2 * N}, DType::f32, MemCategory::communication);
  Tensor target_logit = both.flat_range(N, N);
  kernels::lm_head_ce_partial_forward(row_max, sumexp, target_logit, x.value().view(xs), w.value(),
                                      tg, v0, valid, ignore_index);
  Tensor global_max = copy_of(row_max, MemCategory::communication);
  run(group_->all_reduce(global_max, comm::ReduceOp::max), 2 * ring(global_max.nbytes(), size()));
  // Note [Vocabulary-parallel statistics on the host]
  const Device device = x.value().device();
  Tensor both_h = on_host(both);
  const Tensor gm_h = on_host(global_max), m_h = on_host(row_max), s_h = on_host(sumexp);
  const float* m = m_h.data<float>();
  const float* gm = gm_h.data<float>();
  const float* s = s_h.data<float>();
  float* b = both_h.data<float>();
  for (int64_t n = 0; n < N; ++n) b[n] = s[n] == 0.0f ? 0.0f : s[n] * std::exp(m[n] - gm[n]);
  run(group_->all_reduce(both_h), 2 * ring(both_h.nbytes(), size()));
  Tensor lse_h = Tensor::empty(Shape{N}, DType::f32, MemCategory::activations,
                               MemoryScope::current_tracker(), Device::cpu());
  float* l = lse_h.data<float>();
  const Tensor tg_h = on_host(tg);
  const int32_t* t = tg_h.data<int32_t>();
  double sum = 0;
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) {
    l[n] = gm[n] + std::log(b[n]);
    if (t[n] == ignore_index) continue;
    sum += static_cast<double>(l[n] - b[N + n]);
    ++count;
  }
  const double denom = denominator > 0 ? denominator : static_cast<double>(count);
  Tensor out_h = Tensor::empty(Shape{1}, DType::f32, MemCategory::activations,
                               MemoryScope::current_tracker(), Device::cpu());
  out_h.data<float>()[0] = denom > 0 ? static_cast<float>(sum / denom) : 0.0f;
  const Tensor out = on_device(out_h, device), lse = on_device(lse_h, device);
  const bool grads = autograd::grad_enabled() && (x.requires_grad() || w.requires_grad());
  if (!grads) return Variable(out);
  auto node = std::make_shared<VocabParallelCeNode>(this, tg, lse, denom, ignore_index, v0, valid);
  node->inputs = {x, w};
  return Variable::from_node(out, node);
}

Tensor TpGroup::vocab_parallel_logits(const Tensor& x, const Tensor& w, int64_t vocab) {
  const int64_t N = rows(x.shape())[0], Vl = w.size(0);
  Tensor local = Tensor::empty(Shape{N, Vl}, DType::f32, MemCategory::activations);
  kernels::lm_head_logits(local, x, w);
  Tensor all = Tensor::empty(Shape{size(), N, Vl}, DType::f32, MemCategory::communication);
  run(group_->all_gather(all.flatten(), local.flatten()), ring(all.nbytes(), size()));
  // Rearranged on the host (generation's last logits, a row per sequence).
  const Tensor all_h = on_host(all);
  Tensor out = Tensor::empty(Shape{N, vocab}, DType::f32, MemCategory::activations,
                             MemoryScope::current_tracker(), Device::cpu());
  const float* a = all_h.data<float>();
  float* o = out.data<float>();
  for (int r = 0; r < size(); ++r) {
    const int64_t v0 = r * Vl, n_cols = std::min(Vl, vocab - v0);
    if (n_cols <= 0) continue;
    for (int64_t n = 0; n < N; ++n)
      std::copy(a + (r * N + n) * Vl, a + (r * N + n) * Vl + n_cols, o + n * vocab + v0);
  }
  out = on_device(out, x.device());
  return out;
}

}  // namespace braid::parallel
