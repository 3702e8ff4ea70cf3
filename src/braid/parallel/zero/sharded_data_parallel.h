// ShardedDataParallel: sharded data parallelism (data_parallel.h), ZeRO stages 1-3 and every FSDP
// sharding strategy but NO_SHARD (which is DDP). Stage 1 shards the optimizer state, stage 2
// also the gradients (reduce-scattered unit by unit during backward, so no full gradient buffer
// exists), stage 3 also the parameters (gathered unit by unit around forward and backward,
// with prefetch). Geometry and groups: Note [Shard geometry] (zero_options.h); the hooks:
// zero_runtime.h.
//
// Per rank, fp32 AdamW, P parameters (padded), N data-parallel ranks, S per shard group:
//   stage 1: params 4P, grads 4P (+ 4P/N with sync_each_batch), optimizer 8P/N
//   stage 2: params 4P, grads 4P/N + units in flight, optimizer 8P/N
//   stage 3: params 4P/S + gathered units, grads 4P/N + units in flight, optimizer 8P/N
// (without sync_each_batch, stages 2 and 3 keep every unit's full gradients between the
// micro-steps of a step, as FSDP's no_sync does). Offload (ZeroOptions) moves the optimizer
// state and, in stage 3, the parameter shards into a file per rank.
#pragma once

#include <memory>

#include "braid/comm/process_group.h"
#include "braid/optim/clip_grad.h"
#include "braid/parallel/data_parallel.h"
#include "braid/parallel/zero/zero_options.h"
#include "braid/parallel/zero/zero_runtime.h"

namespace braid::parallel {

class ShardedDataParallel : public DataParallel {
 public:
  // groups: the mesh's data-parallel groups (ZeroGroups::from_mesh).
  ShardedDataParallel(ZeroGroups groups, ZeroOptions options);
  ~ShardedDataParallel() override;

  std::string describe() const override;
  int dp_rank() const override;
  int dp_size() const override;

  void materialize(nn::Model& model, const MaterializeOptions& options) override;
  std::vector<optim::ParamSlice> optimizer_slices() override;
  std::unique_ptr<optim::StateStore> optimizer_state_store() override;
  std::string memory_note() const override;
  void zero_grad() override;
  void begin_micro_step(int64_t micro_step, int64_t accumulation_steps) override;
  void end_micro_step() override;
  void reduce_accumulated() override;
  double clip_grad_norm(double max_norm, double loss_scale,
                        comm::ProcessGroup* model_parallel) override;
  // Offloaded gradients are read back, summed and written again (Note [Offloaded gradients]).
  void sum_gradient(const std::string& name, comm::ProcessGroup& group) override;
  void after_optimizer_step() override;
  void synchronize() override;
  void for_each_held_unit(const UnitVisitor& fn, const std::vector<int>& units) override;
  ParallelStats last_step_stats() const override;

 private:
  // Calls fn(unit, slice) for every piece of a parameter this rank's optimizer steps, with
  // the slice's master weights (undefined when offloaded) and gradient views.
  void for_each_piece(const std::function<void(ZeroUnit&, optim::ParamSlice, int64_t at)>& fn);

  double offloaded_norm(double max_norm, double loss_scale, const optim::NormReduction& reduce,
                        bool counted);

  std::shared_ptr<ZeroRuntime> rt_;
  bool materialized_ = false;
};

// Tests: how many of the exact sums each offloaded gradient piece takes as it is written (Note
// [Offloaded norm], zero_reduce.cpp), from 0 (every piece read back for the norm) to the usual
// ZeroUnit::kNormSums; a negative count restores the usual. Process-wide.
void set_offloaded_norm_sums_for_testing(int count);

}  // namespace braid::parallel
