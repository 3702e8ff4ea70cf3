#include "braid/parallel/zero/unit_ordered_store.h"

#include <algorithm>
#include <map>

#include "braid/core/error.h"
#include "braid/optim/optimizer.h"

namespace braid::parallel {

UnitOrderedStore::UnitOrderedStore(std::vector<int> unit_of_slice,
                                   std::vector<std::pair<std::string, int64_t>> keys,
                                   std::function<void(int)> unit_done, bool on_host)
    : ResidentStateStore(on_host),
      unit_of_slice_(std::move(unit_of_slice)),
      keys_(std::move(keys)),
      unit_done_(std::move(unit_done)) {}

void UnitOrderedStore::attach(const std::vector<const optim::ParamSlice*>& slices, int num_states) {
  ResidentStateStore::attach(slices, num_states);
  std::map<std::pair<std::string, int64_t>, int> unit_of;
  for (size_t k = 0; k < keys_.size(); ++k) unit_of[keys_[k]] = unit_of_slice_[k];
  const int units = unit_of_slice_.empty()
                        ? 0
                        : *std::max_element(unit_of_slice_.begin(), unit_of_slice_.end()) + 1;
  trainable_.assign(static_cast<size_t>(units), 0);
  unit_.assign(slices.size(), 0);
  for (size_t i = 0; i < slices.size(); ++i) {
    auto it = unit_of.find({slices[i]->name(), slices[i]->shard.offset});
    BRAID_CHECK(it != unit_of.end(), "optimizer slice '", slices[i]->name(), "' at element ",
                slices[i]->shard.offset, " is not one the strategy handed out");
    unit_[i] = it->second;
    if (slices[i]->trainable()) ++trainable_[static_cast<size_t>(it->second)];
  }
  order_ = StateStore::step_order();
  std::stable_sort(order_.begin(), order_.end(),
                   [&](size_t a, size_t b) { return unit_[a] < unit_[b]; });
}

void UnitOrderedStore::begin_step() {
  ResidentStateStore::begin_step();
  left_ = trainable_;
}

void UnitOrderedStore::release(size_t i) {
  ResidentStateStore::release(i);  // the master weights back where the strategy reads them
  const int u = unit_.at(i);
  if (--left_[static_cast<size_t>(u)] == 0) unit_done_(u);
}

}  // namespace braid::parallel
