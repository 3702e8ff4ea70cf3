#include "braid/optim/state_store.h"

#include <numeric>

#include "braid/core/error.h"
#include "braid/optim/optimizer.h"

namespace braid::optim {

std::vector<size_t> StateStore::step_order() const {
  std::vector<size_t> order(num_slices_);
  std::iota(order.begin(), order.end(), size_t{0});
  return order;
}

void ResidentStateStore::attach(const std::vector<const ParamSlice*>& slices, int num_states) {
  slices_ = slices;
  num_slices_ = slices.size();
  state_.assign(slices.size(), {});
  for (size_t i = 0; i < slices.size(); ++i) {
    BRAID_CHECK(slices[i]->param.defined(), "optimizer: parameter '", slices[i]->name(),
                "' has no master weights (only an offloading state store can supply them)");
    for (int k = 0; k < num_states; ++k) {
      Tensor t = Tensor::empty(slices[i]->param.shape(), DType::f32, MemCategory::optimizer_state);
      t.zero_();
      state_[i].push_back(t);
    }
  }
}

SliceSlot ResidentStateStore::acquire(size_t i) {
  return {slices_.at(i)->param, state_.at(i), Tensor()};
}

void ResidentStateStore::visit(const std::function<void(size_t, SliceSlot&)>& fn, bool) {
  for (size_t i = 0; i < slices_.size(); ++i) {
    SliceSlot slot = acquire(i);
    fn(i, slot);
  }
}

}  // namespace braid::optim
