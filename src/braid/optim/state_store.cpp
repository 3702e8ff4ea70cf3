#include "braid/optim/state_store.h"

#include <algorithm>
#include <numeric>

#include "braid/core/error.h"
#include "braid/core/memory_tracker.h"
#include "braid/optim/optimizer.h"

namespace braid::optim {

std::vector<size_t> StateStore::step_order() const {
  std::vector<size_t> order(num_slices_);
  std::iota(order.begin(), order.end(), size_t{0});
  return order;
}

// Each state is one buffer, the slices' tensors views into it one after the other (no gaps, so
// the tracker holds exactly the slices' bytes): one allocation, which a large state gets as huge
// pages populated at once (Note [Large host allocations], core/storage.cpp), instead of one per
// slice faulted in page by page; a checkpoint load fills it front to back.
void ResidentStateStore::attach(const std::vector<const ParamSlice*>& slices, int num_states) {
  slices_ = slices;
  num_slices_ = slices.size();
  state_.assign(slices.size(), {});
  masters_.assign(slices.size(), Tensor());
  const auto& tracker = MemoryScope::current_tracker();
  int64_t total = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    const Tensor& param = slices[i]->param;
    BRAID_CHECK(param.defined(), "optimizer: parameter '", slices[i]->name(),
                "' has no master weights (only an offloading state store can supply them)");
    BRAID_CHECK(param.device() == slices[0]->param.device(), "optimizer: parameter '",
                slices[i]->name(), "' is on ", param.device().str(), ", '", slices[0]->name(),
                "' on ", slices[0]->param.device().str(), " (one optimizer steps one device)");
    total += param.numel();
  }
  if (slices.empty()) return;
  // With the master weights, faulted in where first written (a load's reads, or the first step),
  // or in pinned host memory (Note [Optimizer state on the host]).
  std::vector<Tensor> states;
  for (int k = 0; k < num_states; ++k) {
    if (on_host_) {
      states.push_back(Tensor::pinned(Shape{total}, DType::f32, MemCategory::optimizer_state));
      states.back().zero_();
    } else {
      states.push_back(Tensor::zeros(Shape{total}, DType::f32, MemCategory::optimizer_state,
                                     tracker, slices[0]->param.device()));
    }
  }
  // The host masters are taken from the device before their first use (sync_masters).
  const Tensor masters =
      on_host_ ? Tensor::pinned(Shape{total}, DType::f32, MemCategory::parameters) : Tensor();
  int64_t at = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    const Tensor& param = slices[i]->param;
    for (const Tensor& s : states)
      state_[i].push_back(s.flat_range(at, param.numel()).view(param.shape()));
    if (on_host_) {
      masters_[i] = masters.flat_range(at, param.numel()).view(param.shape());
      largest_ = std::max(largest_, param.numel());
    }
    at += param.numel();
  }
}

void ResidentStateStore::sync_masters() {
  if (!on_host_ || synced_) return;
  for (size_t i = 0; i < slices_.size(); ++i) masters_[i].copy_(slices_[i]->param);
  synced_ = true;
}

void ResidentStateStore::begin_step() {
  sync_masters();
}

SliceSlot ResidentStateStore::acquire(size_t i) {
  if (!on_host_) return {slices_.at(i)->param, state_.at(i), Tensor()};
  const Tensor& g = slices_.at(i)->grad;
  Tensor grad;
  if (g.defined() && g.device().is_cpu()) {
    grad = g;
  } else if (g.defined()) {  // into the pinned buffer the update reads it from
    Tensor& stage = grad_stage_[g.dtype()];
    if (!stage.defined())
      stage = Tensor::pinned(Shape{largest_}, g.dtype(), MemCategory::gradients);
    grad = stage.flat_range(0, g.numel()).view(g.shape());
    grad.copy_(g);
  }
  return {masters_.at(i), state_.at(i), grad};
}

void ResidentStateStore::release(size_t i) {
  master_back(i);
}

void ResidentStateStore::master_back(size_t i) {
  if (!on_host_) return;
  Tensor param = slices_.at(i)->param;  // a handle on the slice's master weights
  param.copy_(masters_.at(i));
}

void ResidentStateStore::visit(const std::function<void(size_t, SliceSlot&)>& fn, bool write) {
  sync_masters();
  for (size_t i = 0; i < slices_.size(); ++i) {
    SliceSlot slot{on_host_ ? masters_[i] : slices_[i]->param, state_[i], Tensor()};
    fn(i, slot);
    if (write) master_back(i);
  }
}

std::string ResidentStateStore::describe() const {
  if (!on_host_) return "in memory";
  int64_t state = 0, masters = 0;
  for (size_t i = 0; i < slices_.size(); ++i) {
    for (const Tensor& t : state_[i]) state += static_cast<int64_t>(t.nbytes());
    masters += static_cast<int64_t>(masters_[i].nbytes());
  }
  return "in host memory, the step on the CPU (parallel.offload_optimizer cpu): optimizer state " +
         format_bytes(state) + ", master weights " + format_bytes(masters);
}

}  // namespace braid::optim
