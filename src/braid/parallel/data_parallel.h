// DataParallel: how the ranks of one data-parallel group hold a model's units and reduce their
// gradients, one of two implementations chosen by the plan (parallelize.h):
//   ReplicatedDataParallel  (ddp/)   every rank holds every unit; buckets all-reduced in backward
//   ShardedDataParallel     (zero/)  ZeRO stages 1-3 / FSDP: optimizer state, gradients and
//                                    (stage 3) parameters sharded per unit, with a policy per unit
// It is one part of the parallel runtime (Parallelism, parallelism.h), never a wrapper around
// another: tensor and pipeline parallelism sit beside it and call it. The model it holds is what
// this rank's declaration says (a tensor-parallel slice, a pipeline stage's units): the same on
// every rank of its group.
//
// The micro-step protocol, identical on every rank of the group (Note [Micro-steps]):
//
//   zero_grad();
//   for k in 0..n-1: begin_micro_step(k, n); <forward; backward>; end_micro_step();
//   norm = clip_grad_norm(max_norm, loss_scale, model_parallel);
//   optimizer.step(lr);                 // over optimizer_slices()
//   after_optimizer_step();
//   synchronize();                      // before reading parameters outside a forward
//
// A pipeline schedule runs n backwards as micro-steps k < n of n + 1 (each only accumulates) and
// then reduce_accumulated(), which reduces as the last micro-step's backward would have (Note
// [Pipeline reduction], pipeline/pipeline_parallelism.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/nn/model.h"
#include "braid/optim/optimizer.h"
#include "braid/parallel/step.h"

namespace braid::parallel {

class DataParallel {
 public:
  virtual ~DataParallel() = default;
  DataParallel() = default;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // "zero3 (FULL_SHARD) over dp=4 as 2 shard x 2 replicate"
  virtual std::string describe() const = 0;
  // The data-parallel coordinate: this rank reads share dp_rank() of dp_size() of every batch.
  virtual int dp_rank() const = 0;
  virtual int dp_size() const = 0;

  // Allocates what this rank holds of `model` (declared, not materialised), fills it, and
  // hooks the model. Collective: if any rank fails (e.g. out of its memory budget) every rank
  // throws, the failing rank its own error and the others one naming it.
  virtual void materialize(nn::Model& model, const MaterializeOptions& options) = 0;
  // The slices this rank's optimizer steps (master parameters and their reduced gradients).
  virtual std::vector<optim::ParamSlice> optimizer_slices() = 0;
  // Where the optimizer keeps its state for those slices (null: in memory). Pass it to the
  // optimizer's constructor, so no in-memory state is ever allocated when it is offloaded.
  virtual std::unique_ptr<optim::StateStore> optimizer_state_store() { return nullptr; }
  // The group whose ranks step the same slices with the same state (DDP's replicas; null where
  // each rank's slices are its own): a checkpoint load reads a chunk of that state on each of
  // them and gathers the rest (Note [Ranged loads], CheckpointReader::read_optimizer).
  virtual comm::ProcessGroup* optimizer_replicas() const { return nullptr; }

  virtual void zero_grad() = 0;
  virtual void begin_micro_step(int64_t micro_step, int64_t accumulation_steps) = 0;
  virtual void end_micro_step() = 0;
  // After backwards that ran as micro-steps k < n - 1 of n (accumulating, nothing reduced):
  // reduces what they accumulated as the last micro-step's backward would have, every unit
  // counting as used.
  virtual void reduce_accumulated() = 0;
  // The exact global norm of the reduced gradients (Note [Global norm], optim/clip_grad.h) over
  // this group and then over `model_parallel` (the ranks holding other parts of the model, null:
  // none; Note [Model-parallel norm]), and clipping to max_norm when max_norm > 0. Gradients
  // that hold loss_scale times their value (fp16) are unscaled in the same pass and the unscaled
  // norm is returned (Note [Unscale with the clip]). Non-finite: returned, gradients untouched.
  virtual double clip_grad_norm(double max_norm, double loss_scale,
                                comm::ProcessGroup* model_parallel) = 0;
  // After the reductions: sums the reduced gradient of parameter `name` over `group`, whose ranks
  // hold the same pieces of it (a pipeline's tied embeddings). Collective over group.
  virtual void sum_gradient(const std::string& name, comm::ProcessGroup& group);
  virtual void after_optimizer_step() = 0;
  // Waits for everything still in flight (e.g. the exchange of updated shards that the next
  // forward would wait for); call before reading parameters outside a forward.
  virtual void synchronize() {}

  // fn(g, params): g indexes model.full_layout().units(); params is the unit's parameters as this
  // rank's declaration holds them (a buffer holding the unit alone; read only).
  using UnitVisitor = std::function<void(int, const Tensor&)>;
  // Collective over the group: fn for each of `units` (indices into model.layout(), increasing;
  // the same list on every rank of the group), gathered from the shards where sharded.
  virtual void for_each_held_unit(const UnitVisitor& fn, const std::vector<int>& units) = 0;

  virtual ParallelStats last_step_stats() const { return {}; }
  // A line for the memory report about what is kept outside the rank's memory (offloaded bytes
  // and I/O); empty when nothing.
  virtual std::string memory_note() const { return ""; }
};

// 0, 1, ..., layout.units().size() - 1: every unit, for DataParallel::for_each_held_unit.
std::vector<int> all_units(const nn::ParamLayout& layout);

}  // namespace braid::parallel
