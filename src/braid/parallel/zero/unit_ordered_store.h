// UnitOrderedStore: ShardedDataParallel's in-memory optimizer state (Note [Optimizer state],
// optim/state_store.h), visited unit by unit, telling the strategy when a unit's last slice has
// been updated. Note [Update overlap]: the exchange of a unit's updated pieces (the all-gather
// that ZeRO-1/2 and hybrid ZeRO-3 need after the step) then starts while the optimizer still
// updates the other units, instead of after the whole step, so it overlaps the step.
#pragma once

#include <functional>
#include <vector>

#include "braid/optim/state_store.h"

namespace braid::parallel {

class UnitOrderedStore : public optim::ResidentStateStore {
 public:
  // unit_of: the unit of each slice the strategy handed out, in that order (the optimizer's
  // order is matched by the slices' shard records); unit_done(u) after unit u's last update.
  // on_host: the state and the step on the host (Note [Optimizer state on the host]).
  UnitOrderedStore(std::vector<int> unit_of_slice,
                   std::vector<std::pair<std::string, int64_t>> keys,
                   std::function<void(int)> unit_done, bool on_host = false);

  void attach(const std::vector<const optim::ParamSlice*>& slices, int num_states) override;
  std::vector<size_t> step_order() const override { return order_; }
  void begin_step() override;
  void release(size_t i) override;

 private:
  std::vector<int> unit_of_slice_;
  std::vector<std::pair<std::string, int64_t>> keys_;
  std::function<void(int)> unit_done_;
  std::vector<int> unit_;       // per attached slice
  std::vector<int> trainable_;  // per unit: trainable slices
  std::vector<int> left_;       // per unit: trainable slices not yet updated this step
  std::vector<size_t> order_;
};

}  // namespace braid::parallel
