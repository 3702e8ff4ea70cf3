// Optimizers over flat buffers: each ParamSlice is a parameter, or a range of its elements (a
// ZeRO shard) described by its ShardRecord, with its gradient view of the same size. State tensors
// are allocated at construction in category optimizer_state (so memory reports see them before the
// first step and a checkpoint can restore into them) and exposed by name, bit-exact.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "braid/core/shard_record.h"
#include "braid/core/tensor.h"
#include "braid/optim/state_store.h"

namespace braid::optim {

struct ParamSlice {
  // Which elements of which parameter: names the state tensors ("<name>.exp_avg", ...) and gives
  // the full shape (decay rules classify a shard like its parameter) and the owned range.
  ShardRecord shard;
  // f32 master weights, shard.numel elements; undefined when the optimizer's state store holds
  // them (offloaded: the store hands them out at each update, Note [Optimizer state]).
  Tensor param;
  Tensor grad;  // f32 or bf16, same numel; undefined = frozen (skipped), unless grad_in_store
  // The compute-dtype copy of `param` that forward reads (bf16/f16 training), or undefined: the
  // optimizer keeps it current wherever it writes `param` (Note [Compute copy in the step]).
  Tensor compute;
  // The state store hands the gradient out at each update (offloaded, Note [Optimizer state]).
  bool grad_in_store = false;

  bool trainable() const { return grad.defined() || grad_in_store; }

  const std::string& name() const { return shard.name; }
  // A whole parameter.
  static ParamSlice whole(std::string name, Tensor param, Tensor grad);
};

struct ParamGroup {
  std::vector<ParamSlice> params;
  float lr_scale = 1.0f;
  float weight_decay = 0.0f;
};

// Note [Compute copy in the step]: in bf16/f16 training forward reads a copy of the f32 masters
// rounded to the compute dtype. A slice that names that copy (ParamSlice::compute) has it
// refreshed by the optimizer wherever the optimizer writes the masters: after each update (by
// the update's own pass where the optimizer fuses it, AdamW's, so the masters are read once a
// step instead of again by a separate cast: 110 of 7160 ms a step for gpt2-medium bf16 under
// DDP), and after visit_slices with write (a checkpoint's load). The bits are cast's.
class Optimizer {
 public:
  virtual ~Optimizer();
  // One update of every slice with learning rate lr * group.lr_scale; increments the step
  // count first (so bias correction uses t = 1 on the first step). Visits the slices in the
  // state store's order (Note [Optimizer state], state_store.h).
  void step(float lr);
  // ("<slice name>.<state>", tensor) for every state tensor, in a fixed order. Writing into
  // the returned tensors restores state (they are the optimizer's own buffers).
  std::vector<std::pair<std::string, Tensor>> state_tensors();
  // For checkpoints, between steps: fn(slice, slot) for every slice, slot holding its master
  // weights and state tensors (in state_names() order). With `write`, what fn wrote is kept.
  void visit_slices(const std::function<void(const ParamSlice&, SliceSlot&)>& fn, bool write);
  const std::vector<std::string>& state_names() const { return state_names_; }
  virtual const char* name() const = 0;

  // Replaces the state store (before the first step): the new store is attached to the same
  // slices and starts from zero state.
  void set_state_store(std::unique_ptr<StateStore> store);
  const StateStore& state_store() const { return *store_; }

  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t t) {
    store_->flush();
    step_count_ = t;
  }
  std::vector<ParamGroup>& groups() { return groups_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }

 protected:
  Optimizer(std::vector<ParamGroup> groups, std::vector<std::string> state_names);
  // Updates one slice: `slot` holds its master weights and state, `grad` its gradient, resident.
  // compute (when not null): also write the updated masters rounded to its dtype (only passed
  // to an optimizer whose fuses_compute_copy() is true).
  virtual void update(const ParamGroup& group, SliceSlot& slot, const Tensor& grad, float lr,
                      Tensor* compute) = 0;
  virtual bool fuses_compute_copy() const { return false; }

  // One slice's update, gathered for update_all.
  struct SliceUpdate {
    const ParamGroup* group;
    SliceSlot slot;
    Tensor grad;
    Tensor compute;  // defined: write the updated masters rounded into it (as update's compute)
  };
  // Updates every slice at once, as update() slice by slice would, bit for bit (a GPU takes
  // them in a few launches: Note [Multi-tensor launches]); called only where the store's slots
  // stay resident and updates_all_at_once() is true.
  virtual bool updates_all_at_once() const { return false; }
  virtual void update_all(std::vector<SliceUpdate>& /*updates*/, float /*lr*/) {}

  std::vector<ParamGroup> groups_;
  int64_t step_count_ = 0;

 private:
  // Slice k's update in the current step (store order; skips a frozen slice): acquire, update,
  // compute copy, release. The step's loop, or the store later (Note [Deferred step]).
  void update_slice(size_t k);
  std::optional<SliceUpdate> acquire_slice(size_t k);
  void finish_slice(size_t k, const SliceUpdate& u);

  float step_lr_ = 0.0f;  // the current step's learning rate
  std::vector<std::string> state_names_;
  std::vector<std::pair<size_t, size_t>> where_;  // flat slice -> (group, position)
  std::unique_ptr<StateStore> store_;
};

// AdamW (decoupled weight decay, bias correction), as torch.optim.AdamW.
class AdamW : public Optimizer {
 public:
  // store: where the state lives (null: in memory).
  AdamW(std::vector<ParamGroup> groups, float beta1 = 0.9f, float beta2 = 0.999f, float eps = 1e-8f,
        std::unique_ptr<StateStore> store = nullptr);
  const char* name() const override { return "adamw"; }

 protected:
  void update(const ParamGroup& group, SliceSlot& slot, const Tensor& grad, float lr,
              Tensor* compute) override;
  bool fuses_compute_copy() const override { return true; }
  bool updates_all_at_once() const override { return true; }
  void update_all(std::vector<SliceUpdate>& updates, float lr) override;

 private:
  float beta1_, beta2_, eps_;
};

// SGD with optional (Nesterov) momentum and L2 weight decay, as torch.optim.SGD.
class SGD : public Optimizer {
 public:
  SGD(std::vector<ParamGroup> groups, float momentum = 0.0f, bool nesterov = false,
      std::unique_ptr<StateStore> store = nullptr);
  const char* name() const override { return "sgd"; }

 protected:
  void update(const ParamGroup& group, SliceSlot& slot, const Tensor& grad, float lr,
              Tensor* compute) override;

 private:
  float momentum_;
  bool nesterov_;
};

}  // namespace braid::optim
