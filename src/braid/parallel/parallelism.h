// Parallelism: the parallel runtime of one model, what parallelize() (parallelize.h) builds from
// the plan on the one DeviceMesh. It is not a wrapper chain: its parts sit side by side and its
// methods say how they compose, step by step (docs/design.md "Parallelism as a plan"):
//   data      DataParallel over the mesh's dp groups (replicated or sharded, a policy per unit)
//   tensor    TensorParallelism over tp (optional): the model's slices
//   pipeline  PipelineParallelism over pp (optional): the stage, the schedule
//   context   CpGroup over cp (optional): the sequence split and attention across it
//
// The Accelerator (train/accelerator.h) is its one user in training; the step (Note [One step
// path]):
//
//   zero_grad();
//   loss = forward_backward(model, micro_batches);   // the micro-step loop or the schedule
//   norm = clip_grad_norm(max_norm, loss_scale);     // every reduction has finished here
//   optimizer.step(lr);                              // over optimizer_slices()
//   after_optimizer_step();
//   ...
//   synchronize();                                   // before reading weights outside a forward
//
// A model whose forward is the user's own code (no pipeline: is_pipelined() false) may run the
// micro-steps itself: begin_micro_step(k, n); forward; backward; end_micro_step(). Forward
// passes without gradients (evaluation, generation) go through eval_loss() and last_logits():
// the hooks gather and free what they use. Every rank must run the same forwards (they may
// gather).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "braid/nn/transformer.h"
#include "braid/parallel/context/cp_group.h"
#include "braid/parallel/data_parallel.h"
#include "braid/parallel/device_mesh.h"
#include "braid/parallel/pipeline/pipeline_parallelism.h"
#include "braid/parallel/tensor/tensor_parallelism.h"

namespace braid::parallel {

class Parallelism {
 public:
  // tensor, pipeline and context may be null (not parallelised along tp / pp / cp).
  Parallelism(std::shared_ptr<DeviceMesh> mesh, std::unique_ptr<DataParallel> data,
              std::unique_ptr<TensorParallelism> tensor,
              std::unique_ptr<PipelineParallelism> pipeline,
              std::unique_ptr<CpGroup> context = nullptr);
  ~Parallelism();
  Parallelism(const Parallelism&) = delete;
  Parallelism& operator=(const Parallelism&) = delete;

  // "zero3 (FULL_SHARD) over dp=2 ... x tp=2 x pp=2 (1f1b, ...)"
  std::string describe() const;
  const DeviceMesh& mesh() const { return *mesh_; }
  // The data-parallel coordinate: this rank reads share dp_rank() of dp_size() of every batch
  // (the cp ranks of a share read the same, Note [Context-parallel layout]).
  int dp_rank() const { return mesh_->coord("batch"); }
  int dp_size() const { return mesh_->size("batch"); }
  // The ranks whose losses add up to one replica's: dp x cp (each cp rank's loss covers its
  // tokens only).
  int loss_shares() const { return data_->dp_size(); }
  bool is_pipelined() const { return pipeline_ != nullptr; }

  // What a Transformer must be declared with before materialize(): this rank's tensor-parallel
  // split (null without; Note [Tensor-parallel layout]).
  nn::TensorParallel* tensor_parallel() { return tensor_ ? tensor_->model_split() : nullptr; }
  // And its context-parallel split (null without; Note [Context-parallel layout]).
  nn::ContextParallel* context_parallel() { return context_.get(); }

  // Applies the plan to the declared model: a pipeline splits it first (a StagedModel declared
  // whole keeps this rank's stage, Note [Pipeline stage]); then what this rank holds is
  // allocated, filled (each unit whole, as one process would, then sliced for tensor
  // parallelism) and hooked. Collective.
  void materialize(nn::Model& model, const MaterializeOptions& options);
  std::vector<optim::ParamSlice> optimizer_slices() { return data_->optimizer_slices(); }
  std::unique_ptr<optim::StateStore> optimizer_state_store() {
    return data_->optimizer_state_store();
  }

  void zero_grad();
  // The forward and backward of every micro-batch of a step, after zero_grad() and before
  // clip_grad_norm(): the micro-step loop, or the pipeline's schedule and its finish.
  StepLoss forward_backward(nn::StagedModel& model, const MicroBatches& batches);
  // One micro-step of a loop the caller runs (its own forward and backward between them); not
  // for a pipelined model, whose forward runs inside the schedule.
  void begin_micro_step(int64_t micro_step, int64_t accumulation_steps);
  void end_micro_step();
  // The summed loss (denominator 1) of one batch, without recording (evaluation); positions:
  // packed rows' (Note [Packed rows]), or undefined.
  double eval_loss(nn::StagedModel& model, const Tensor& ids, const Tensor& targets,
                   const Tensor& positions = Tensor());
  // The logits [1, V] f32 of the last position of ids [1, T], without recording (generation).
  Tensor last_logits(nn::Transformer& model, const Tensor& ids);
  // The exact global norm over every rank's gradients (Note [Model-parallel norm]), clipping to
  // max_norm when > 0; loss_scale: DataParallel::clip_grad_norm.
  double clip_grad_norm(double max_norm, double loss_scale = 1.0);
  void after_optimizer_step() { data_->after_optimizer_step(); }
  void synchronize() { data_->synchronize(); }

  using UnitVisitor = DataParallel::UnitVisitor;
  // Collective: fn(g, whole unit g) for every unit of the whole model, in order, on every rank.
  // Export streams through this, so no rank ever holds more than one gathered unit beyond what
  // it keeps anyway.
  void for_each_full_unit(const UnitVisitor& fn);
  // Collective over the ranks that hold the same units (data and tensor parallel peers): fn for
  // each of `units` (indices into model.layout(), increasing), whole (tp slices placed).
  void for_each_held_unit(const UnitVisitor& fn, const std::vector<int>& units);

  ParallelStats last_step_stats() const;
  // Collective, once training is over: writes what the runtime reports besides the step
  // statistics (a pipeline's Chrome trace); returns a line saying what it wrote ("": nothing).
  std::string finish_training();
  std::string memory_note() const { return data_->memory_note(); }

  DataParallel& data() { return *data_; }
  PipelineParallelism* pipeline() { return pipeline_.get(); }

 private:
  nn::Transformer& transformer(const char* what) const;
  nn::StagedModel& staged(const char* what) const;

  std::shared_ptr<DeviceMesh> mesh_;
  std::unique_ptr<DataParallel> data_;
  std::unique_ptr<TensorParallelism> tensor_;
  std::unique_ptr<PipelineParallelism> pipeline_;
  std::unique_ptr<CpGroup> context_;
  comm::ProcessGroup* model_parallel_ = nullptr;  // pp x tp (null: one rank holds everything)
  nn::Model* model_ = nullptr;
};

// The model as a Transformer, for what only a transformer can be split by (`what`: "tensor
// parallelism"); throws naming it for any other model.
nn::Transformer& transformer_for(nn::Model& model, const char* what);

}  // namespace braid::parallel
