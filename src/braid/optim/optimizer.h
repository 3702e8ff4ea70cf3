// Optimizers over flat buffers: each ParamSlice is a parameter, or a range of its elements (a
// ZeRO shard) described by its ShardRecord, with its gradient view of the same size. State tensors
// are allocated at construction in category optimizer_state (so memory reports see them before the
// first step and a checkpoint can restore into them) and exposed by name, bit-exact.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "braid/core/shard_record.h"
#include "braid/core/tensor.h"

namespace braid::optim {

struct ParamSlice {
  // Which elements of which parameter: names the state tensors ("<name>.exp_avg", ...) and gives
  // the full shape (decay rules classify a shard like its parameter) and the owned range.
  ShardRecord shard;
  Tensor param;  // f32 (master weights), shard.numel elements
  Tensor grad;   // f32 or bf16, same numel; undefined = frozen, skipped by step()

  const std::string& name() const { return shard.name; }
  // A whole parameter.
  static ParamSlice whole(std::string name, Tensor param, Tensor grad);
};

struct ParamGroup {
  std::vector<ParamSlice> params;
  float lr_scale = 1.0f;
  float weight_decay = 0.0f;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every slice with learning rate lr * group.lr_scale; increments the step
  // count first (so bias correction uses t = 1 on the first step).
  virtual void step(float lr) = 0;
  // ("<slice name>.<state>", tensor) for every state tensor, in a fixed order. Writing into
  // the returned tensors restores state (they are the optimizer's own buffers).
  virtual std::vector<std::pair<std::string, Tensor>> state_tensors() = 0;
  virtual const char* name() const = 0;

  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t t) { step_count_ = t; }
  std::vector<ParamGroup>& groups() { return groups_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }

 protected:
  explicit Optimizer(std::vector<ParamGroup> groups);
  std::vector<ParamGroup> groups_;
  int64_t step_count_ = 0;
};

// AdamW (decoupled weight decay, bias correction), as torch.optim.AdamW.
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<ParamGroup> groups, float beta1 = 0.9f, float beta2 = 0.999f,
        float eps = 1e-8f);
  void step(float lr) override;
  std::vector<std::pair<std::string, Tensor>> state_tensors() override;
  const char* name() const override { return "adamw"; }

 private:
  float beta1_, beta2_, eps_;
  std::vector<std::vector<Tensor>> exp_avg_, exp_avg_sq_;  // [group][slice], f32
};

// SGD with optional (Nesterov) momentum and L2 weight decay, as torch.optim.SGD.
class SGD : public Optimizer {
 public:
  SGD(std::vector<ParamGroup> groups, float momentum = 0.0f, bool nesterov = false);
  void step(float lr) override;
  std::vector<std::pair<std::string, Tensor>> state_tensors() override;
  const char* name() const override { return "sgd"; }

 private:
  float momentum_;
  bool nesterov_;
  std::vector<std::vector<Tensor>> momentum_buffer_;  // [group][slice]; empty if momentum 0
};

}  // namespace braid::optim
