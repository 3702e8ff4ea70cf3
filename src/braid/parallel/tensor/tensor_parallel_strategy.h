// TensorParallelStrategy: Megatron-style tensor parallelism on a dp x tp DeviceMesh, composed
// with a data-parallel strategy (DDP or ZeRO-1/2/3) over the dp group. The model is declared
// with this rank's slices (tensor_parallel(), Note [Tensor-parallel layout] in
// nn/tensor_parallel.h); the inner strategy treats that local model as its model (every rank of
// a dp group holds the same slices), so its buckets, shards and optimizer slices need no change.
// This wrapper adds what tensor parallelism changes around it:
//   - materialisation fills each unit from its full values (initialisation or a checkpoint sees
//     one process's model) and keeps this rank's slices;
//   - the gradient norm also sums over the tp group, counting replicated parameters once (Note
//     [Model-parallel norm]);
//   - for_each_full_unit gathers the tp ranks' slices into the full unit (export, comparison).
// The tp ranks of a dp coordinate read the same batches (data is sharded by dp only).
#pragma once

#include <memory>

#include "braid/parallel/device_mesh.h"
#include "braid/parallel/strategy.h"
#include "braid/parallel/tensor/tp_group.h"

namespace braid::parallel {

class TensorParallelStrategy : public Strategy {
 public:
  // inner: built over mesh.group("dp").
  TensorParallelStrategy(std::shared_ptr<DeviceMesh> mesh, std::unique_ptr<Strategy> inner,
                         bool sequence_parallel);

  std::string describe() const override;
  int dp_rank() const override { return inner_->dp_rank(); }
  int dp_size() const override { return inner_->dp_size(); }
  nn::TensorParallel* tensor_parallel() override { return tp_.get(); }

  void materialize(nn::Model& model, const MaterializeOptions& options) override;
  std::vector<optim::ParamSlice> optimizer_slices() override { return inner_->optimizer_slices(); }
  std::unique_ptr<optim::StateStore> optimizer_state_store() override {
    return inner_->optimizer_state_store();
  }
  void zero_grad() override;
  void begin_micro_step(int64_t micro_step, int64_t accumulation_steps) override {
    inner_->begin_micro_step(micro_step, accumulation_steps);
  }
  void end_micro_step() override { inner_->end_micro_step(); }
  void reduce_accumulated() override { inner_->reduce_accumulated(); }
  double clip_grad_norm(double max_norm, double loss_scale) override {
    return inner_->clip_grad_norm(max_norm, loss_scale);
  }
  void after_optimizer_step() override { inner_->after_optimizer_step(); }
  void synchronize() override { inner_->synchronize(); }
  void for_each_full_unit(const UnitVisitor& fn) override;
  void for_each_held_unit(const UnitVisitor& fn, const std::vector<int>& units) override;
  // exposed_comm_ms adds the time the model waited for tp collectives since zero_grad().
  StrategyStats last_step_stats() const override;
  std::string memory_note() const override { return inner_->memory_note(); }

  TpGroup& tp_group() { return *tp_; }
  Strategy& inner() { return *inner_; }

 private:
  std::shared_ptr<DeviceMesh> mesh_;
  std::unique_ptr<Strategy> inner_;
  std::unique_ptr<TpGroup> tp_;
  nn::Transformer* model_ = nullptr;
};

}  // namespace braid::parallel
