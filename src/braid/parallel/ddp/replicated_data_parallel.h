// ReplicatedDataParallel: data parallelism with every unit replicated. Every rank holds the whole
// model in one FlatBuffer (nn/flat_buffer.h), its gradients and its optimizer state. With a group
// of more than one rank, DistributedDataParallel all-reduces the gradients in buckets while
// backward runs (plan "ddp", and FSDP's NO_SHARD); without one it is a single process ("none").
//
// Accumulation (Note [Accumulation order]): by default the micro-steps before the last only
// accumulate locally (no_sync) and the last one reduces the sum, as PyTorch DDP's no_sync. With
// sync_each_batch every micro-step is reduced and the reduced micro-step gradients are added up
// in order, which is what the sharded strategies do by default: the two orders give different
// rounding, so comparing strategies bit for bit needs the same setting on both sides.
#pragma once

#include <memory>
#include <string>

#include "braid/comm/process_group.h"
#include "braid/parallel/data_parallel.h"
#include "braid/parallel/ddp/distributed_data_parallel.h"

namespace braid::parallel {

struct ReplicatedOptions {
  double bucket_mb = 25.0;
  bool find_unused_parameters = false;
  bool sync_each_batch = false;
  DType reduce_dtype = DType::f32;  // Note [Reduce dtype]
  std::string group_name = "dp";    // the group in describe() ("dp x cp" with context parallelism)
};

class ReplicatedDataParallel : public DataParallel {
 public:
  // group null: one process.
  ReplicatedDataParallel(std::shared_ptr<comm::ProcessGroup> group, ReplicatedOptions options);
  ~ReplicatedDataParallel() override;

  std::string describe() const override;
  int dp_rank() const override { return group_ ? group_->rank() : 0; }
  int dp_size() const override { return group_ ? group_->size() : 1; }

  void materialize(nn::Model& model, const MaterializeOptions& options) override;
  std::vector<optim::ParamSlice> optimizer_slices() override;
  comm::ProcessGroup* optimizer_replicas() const override { return group_.get(); }
  void zero_grad() override;
  void begin_micro_step(int64_t micro_step, int64_t accumulation_steps) override;
  void end_micro_step() override;
  void reduce_accumulated() override;
  double clip_grad_norm(double max_norm, double loss_scale,
                        comm::ProcessGroup* model_parallel) override;
  void after_optimizer_step() override;
  void for_each_held_unit(const UnitVisitor& fn, const std::vector<int>& units) override;
  ParallelStats last_step_stats() const override { return stats_; }

  DistributedDataParallel* ddp() { return ddp_.get(); }

 private:
  nn::Model& model() const;

  std::shared_ptr<comm::ProcessGroup> group_;
  ReplicatedOptions options_;
  nn::Model* model_ = nullptr;
  std::unique_ptr<DistributedDataParallel> ddp_;
  int64_t micro_step_ = 0, accumulation_steps_ = 1;
  Tensor reduced_sum_;  // sync_each_batch: the reduced gradients of the micro-steps so far
  ParallelStats stats_;
};

// The whole-parameter slices of a model materialised in one FlatBuffer (frozen: no gradient).
std::vector<optim::ParamSlice> whole_parameter_slices(nn::Model& model);

}  // namespace braid::parallel
