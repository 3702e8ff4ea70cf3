// StateStore: where an optimizer's per-slice state (AdamW's exp_avg and exp_avg_sq, SGD's
// momentum) and, while it is being updated, a slice's master weights live.
//
// Note [Optimizer state]: the optimizer never holds its state directly. It asks its store for
// slice i (acquire) just before updating it and hands it back after (release), in the order the
// store chooses. The default store keeps everything in memory (category optimizer_state). An
// offloading store (parallel/zero/offload) keeps the state in files, reads a group of slices
// ahead while the previous one is updated, and writes it back behind, so only a few groups are
// in memory at once; the update itself is the same kernel on the same values, so an offloaded
// run gives the same bits as a resident one.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "braid/core/tensor.h"

namespace braid::optim {

struct ParamSlice;

struct SliceSlot {
  Tensor param;               // the slice's master weights, resident until release
  std::vector<Tensor> state;  // num_states f32 tensors of the slice's size
  Tensor grad;                // the gradient, when the store holds it (ParamSlice::grad_in_store)
};

class StateStore {
 public:
  virtual ~StateStore() = default;
  // Once, by the optimizer: its slices (group by group, in order) and how many zero-initialised
  // f32 state tensors each slice has.
  virtual void attach(const std::vector<const ParamSlice*>& slices, int num_states) = 0;
  // The order in which a step visits the slices (indices into the attached list).
  virtual std::vector<size_t> step_order() const;
  virtual void begin_step() {}
  virtual SliceSlot acquire(size_t i) = 0;
  virtual void release(size_t /*i*/) {}
  virtual void end_step() {}
  // Slice i's state tensors themselves (writing them restores state), for tests; a store that
  // keeps state elsewhere throws saying so.
  virtual std::vector<Tensor> resident_state(size_t i) = 0;
  // For checkpoints, between steps: fn(i, slot) for every attached slice, slot holding its master
  // weights and state (no gradient), in the store's order. With `write`, what fn wrote into the
  // slot is kept (a store that keeps it elsewhere writes it back before returning).
  virtual void visit(const std::function<void(size_t, SliceSlot&)>& fn, bool write) = 0;
  virtual std::string describe() const { return "in memory"; }
  // Whether acquire hands out the slice's own tensors and release does nothing, so the
  // optimizer may acquire every slice, update them all at once and release them after
  // (Optimizer::update_all).
  virtual bool slots_stay_resident() const { return false; }

  // Note [Deferred step]: a store may keep a step's updates for later, where it saves reading
  // the masters again (parallel/zero/offload_store.h): the optimizer hands it `update`, which
  // updates slice i as the step would (its learning rate and step count), and calls defer_step()
  // in place of the step's own loop; true means the store took the step and runs `update` for
  // every trainable slice before anything reads the masters or the state again. flush() runs
  // whatever is still left; the optimizer calls it before its next step, and a store's visit()
  // does before reading.
  virtual void set_updater(std::function<void(size_t)> /*update*/) {}
  virtual bool defer_step() { return false; }
  virtual void flush() {}

 protected:
  size_t num_slices_ = 0;
};

// Everything in memory, allocated (zeroed) at attach.
//
// Note [Optimizer state on the host]: with on_host (parallel.offload_optimizer: cpu, DeepSpeed's
// ZeRO-Offload) the state and a copy of each slice's master weights live in pinned host memory
// (Note [Pinned host memory], core/device_backend.h) while the model trains on a device: the
// step runs on the CPU. Each update copies the slice's gradient into a pinned buffer, updates
// the host master and state, and copies the master back to the slice's (device) master weights
// at release, before the strategy exchanges them. The host
// masters are taken from the device at the first step or visit (after a checkpoint or the model
// has filled them); visit with write copies them back too. The device keeps its master weights
// (the model computes from them); what leaves it is the optimizer state, 2 f32 per parameter
// for AdamW.
class ResidentStateStore : public StateStore {
 public:
  explicit ResidentStateStore(bool on_host = false) : on_host_(on_host) {}
  void attach(const std::vector<const ParamSlice*>& slices, int num_states) override;
  void begin_step() override;
  SliceSlot acquire(size_t i) override;
  void release(size_t i) override;
  std::vector<Tensor> resident_state(size_t i) override { return state_.at(i); }
  void visit(const std::function<void(size_t, SliceSlot&)>& fn, bool write) override;
  std::string describe() const override;
  bool slots_stay_resident() const override { return !on_host_; }

 private:
  void sync_masters();         // on_host: the slices' master weights into the host copies, once
  void master_back(size_t i);  // on_host: slice i's host master into its master weights

  bool on_host_;
  bool synced_ = false;
  std::vector<const ParamSlice*> slices_;
  std::vector<std::vector<Tensor>> state_;
  std::vector<Tensor> masters_;         // on_host: the host copies of the slices' master weights
  int64_t largest_ = 0;                 // on_host: the largest slice's elements
  std::map<DType, Tensor> grad_stage_;  // on_host: per dtype, a pinned buffer for one gradient
};

}  // namespace braid::optim
