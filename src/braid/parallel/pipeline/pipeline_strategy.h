// PipelineStrategy: pipeline parallelism on a dp x pp x tp DeviceMesh. The model's blocks are
// split into contiguous stages (partition.h), pp * v of them for v chunks per rank; rank s of the
// pp group holds the virtual stages s, s + pp, ... (Megatron's interleaving), the embeddings on
// the first and the final norm and LM head on the last (Note [Pipeline stage], transformer.h).
// A step's micro-batches (= gradient accumulation steps) flow through the stages under a schedule
// (schedule.h: gpipe, 1f1b, interleaved_1f1b), activations forward and their gradients backward
// by send/recv over the pp group (StageRunner, stage_runner.h).
//
// It wraps the strategy of this rank's stage (DDP or ZeRO-1/2 over the dp group, possibly
// wrapped in tensor parallelism), which treats the stage's units as its model. What pipelining
// changes around it:
//   - Note [Pipeline reduction]: every backward of the schedule only accumulates (the inner
//     strategy sees micro-steps k < n - 1 of n), and once the schedule has drained,
//     reduce_accumulated() reduces each gradient once over dp, as Megatron does after its
//     pipeline flush; so sync_each_batch is off under a pipeline;
//   - tied embeddings: the token table's gradient is summed over the first and last stage (the
//     embedding group) before the norm, so both copies take the same step;
//   - the norm is reduced over dp, then over every model-parallel rank (pp x tp), each parameter
//     counted once (Note [Model-parallel norm]);
//   - the loss lives on the last stage and is broadcast over pp, so every rank reports it;
//   - for_each_full_unit visits the whole model in order, each unit broadcast from its stage.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "braid/parallel/device_mesh.h"
#include "braid/parallel/pipeline/partition.h"
#include "braid/parallel/pipeline/schedule.h"
#include "braid/parallel/pipeline/timeline.h"
#include "braid/parallel/strategy.h"

namespace braid::parallel {

namespace pipeline {
class StageRunner;
}

struct PipelineOptions {
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::one_f_one_b;
  int chunks = 1;                   // v: virtual stages per rank (interleaved_1f1b)
  std::string balance = "uniform";  // uniform | parameters | time (Note [Stage balance])
  int64_t micro_batch = 1;          // the micro-batch "time" balance measures with
  int64_t seq_len = 64;
  std::string trace;  // Chrome trace of every step's timeline ("": none)
};

class PipelineStrategy : public Strategy {
 public:
  // inner: this stage's strategy over mesh.group("dp") (and tp); dp: the innermost
  // data-parallel strategy (inner itself, or what a tensor-parallel strategy wraps), whose norm
  // is reduced over the model-parallel group. Collective over the mesh's world.
  PipelineStrategy(std::shared_ptr<DeviceMesh> mesh, std::unique_ptr<Strategy> inner, Strategy& dp,
                   PipelineOptions options);
  ~PipelineStrategy() override;

  std::string describe() const override;
  int dp_rank() const override { return inner_->dp_rank(); }
  int dp_size() const override { return inner_->dp_size(); }
  nn::TensorParallel* tensor_parallel() override { return inner_->tensor_parallel(); }
  std::optional<nn::PipelineStage> pipeline_stage(const nn::ModelConfig& config) override;

  void materialize(nn::Model& model, const MaterializeOptions& options) override;
  std::vector<optim::ParamSlice> optimizer_slices() override { return inner_->optimizer_slices(); }
  std::unique_ptr<optim::StateStore> optimizer_state_store() override {
    return inner_->optimizer_state_store();
  }
  void zero_grad() override;
  // Micro-steps are the schedule's business: use forward_backward().
  void begin_micro_step(int64_t micro_step, int64_t accumulation_steps) override;
  void end_micro_step() override;
  void reduce_accumulated() override { inner_->reduce_accumulated(); }
  StepLoss forward_backward(nn::Transformer& model, const MicroBatches& batches) override;
  double eval_loss(nn::Transformer& model, const Tensor& ids, const Tensor& targets) override;
  Tensor last_logits(nn::Transformer& model, const Tensor& ids) override;
  double clip_grad_norm(double max_norm, double loss_scale) override {
    return inner_->clip_grad_norm(max_norm, loss_scale);
  }
  void after_optimizer_step() override { inner_->after_optimizer_step(); }
  void synchronize() override { inner_->synchronize(); }
  void for_each_full_unit(const UnitVisitor& fn) override;
  void for_each_held_unit(const UnitVisitor& fn, const std::vector<int>& units) override {
    inner_->for_each_held_unit(fn, units);
  }
  // exposed_comm_ms adds the time this rank waited for activations and gradients.
  StrategyStats last_step_stats() const override;
  std::string memory_note() const override { return inner_->memory_note(); }
  // Writes the Chrome trace when PipelineOptions::trace names a file.
  std::string finish_training() override;

  int stage() const { return mesh_->coord("pp"); }
  int stages() const { return mesh_->size("pp"); }
  // Virtual stage k's blocks (k = chunk * stages + stage), known after pipeline_stage().
  const std::vector<pipeline::BlockRange>& partition() const { return partition_; }
  // This rank's timeline of the steps so far (bubble of the last step, Chrome trace events).
  const pipeline::Timeline& timeline() const { return *timeline_; }
  // Writes every rank's timeline as one Chrome trace at `path` (rank 0 writes). Collective.
  void write_trace(const std::string& path);

 private:
  void sync_tied_embeddings();
  double broadcast_from_last(double v, bool* finite);

  std::shared_ptr<DeviceMesh> mesh_;
  std::unique_ptr<Strategy> inner_;
  PipelineOptions options_;
  std::shared_ptr<comm::ProcessGroup> embedding_group_;  // first and last stage (tied only)
  std::vector<pipeline::BlockRange> partition_;
  std::unique_ptr<pipeline::Timeline> timeline_;
  std::unique_ptr<pipeline::StageRunner> runner_;
  nn::Transformer* model_ = nullptr;
  int64_t steps_ = 0;
};

}  // namespace braid::parallel
