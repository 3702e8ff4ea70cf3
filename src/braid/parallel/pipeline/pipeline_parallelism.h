// PipelineParallelism: pipeline parallelism over the mesh's pp group, one part of the parallel
// runtime (Parallelism, parallelism.h) beside data and tensor parallelism, which it calls but
// never wraps. The model's blocks are split into contiguous stages (partition.h), pp * v of them
// for v chunks per rank; rank s of the pp group holds the virtual stages s, s + pp, ...
// (Megatron's interleaving; zb_v's V: s and 2 pp - 1 - s), the embeddings where the first virtual
// stage is and the final norm and LM head where the last is (Note [Pipeline stage],
// nn/staged_model.h). A step's micro-batches (= gradient accumulation steps) flow through the
// stages under a schedule (schedule.h: gpipe, 1f1b, interleaved_1f1b, zb_h1, zb_v),
// activations forward and their gradients backward by send/recv over the pp group (StageRunner,
// stage_runner.h).
//
// Note [Pipeline reduction]: a schedule is a function of the stage and the data-parallel hooks
// it calls (as Megatron's forward_backward_func): every backward only accumulates (the hooks
// see micro-steps k < n of n + 1), and once the schedule has drained the caller reduces each
// gradient once over dp (DataParallel::reduce_accumulated), as Megatron does after its pipeline
// flush; so sync_each_batch is off under a pipeline. Then, in the caller's finish:
//   - tied embeddings: the token table's gradient is summed over the first and last stage (the
//     embedding group) before the norm, so both copies take the same step;
//   - the loss lives on the last virtual stage's rank and is broadcast over pp, so every rank
//     reports it.
// The norm is reduced over dp, then over every model-parallel rank (pp x tp), each parameter
// counted once (Note [Model-parallel norm]); whole_units() visits the whole model in order,
// each unit broadcast from its stage.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/nn/transformer.h"
#include "braid/parallel/data_parallel.h"
#include "braid/parallel/device_mesh.h"
#include "braid/parallel/pipeline/partition.h"
#include "braid/parallel/pipeline/schedule.h"
#include "braid/parallel/pipeline/timeline.h"
#include "braid/parallel/step.h"

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

// What a schedule calls around each backward it runs: the k-th of the n this rank runs.
struct BackwardHooks {
  std::function<void(int64_t k, int64_t n)> begin;
  std::function<void()> end;
};

class PipelineParallelism {
 public:
  // Collective over the mesh's world (it splits the embedding group off pp).
  PipelineParallelism(std::shared_ptr<DeviceMesh> mesh, PipelineOptions options);
  ~PipelineParallelism();

  // " x pp=2 (1f1b, uniform stages [0, 2) [2, 4))"
  std::string describe() const;
  int stage() const { return mesh_->coord("pp"); }
  int stages() const { return mesh_->size("pp"); }
  // The stages holding the first and the last virtual stage (both 0 under zb_v).
  int first_stage() const { return pipeline::stage_of(shape(), 0); }
  int last_stage() const { return pipeline::stage_of(shape(), shape().virtual_stages() - 1); }

  // Note [Pipeline stage]: splits a model declared whole into the stages and keeps this rank's
  // (StagedModel::keep_stage). Collective over the world ("time" balance measures).
  void split(nn::StagedModel& model);
  // Virtual stage k's blocks (pipeline::virtual_stage), known after split().
  const std::vector<pipeline::BlockRange>& partition() const { return partition_; }

  // The dtype the declared model is materialised in (its activations'), after split().
  void set_compute_dtype(DType dtype);
  // Runs the schedule over the step's micro-batches, calling `hooks` around each backward.
  // Returns this rank's summed loss (0 but on the last stage) and whether it was finite.
  StepLoss run_schedule(nn::StagedModel& model, const MicroBatches& batches,
                        const BackwardHooks& hooks);
  // After the schedule and the data-parallel reduction: sums the tied token table's reduced
  // gradient over the first and last stage (DataParallel::sum_gradient), and broadcasts the last
  // stage's loss over pp. Collective over pp.
  StepLoss finish_step(const nn::StagedModel& model, DataParallel& data, StepLoss local);

  double eval_loss(nn::StagedModel& model, const Tensor& ids, const Tensor& targets);
  Tensor last_logits(nn::Transformer& model, const Tensor& ids);

  // fn(g, unit) for every unit of the whole model in order, on every rank: each stage's units
  // come from held(fn, units) on the stage that holds them (its dp and tp peers gather them
  // there) and are broadcast over pp. Collective over the world.
  using UnitVisitor = std::function<void(int, const Tensor&)>;
  using HeldUnits = std::function<void(const UnitVisitor&, const std::vector<int>&)>;
  void whole_units(const nn::StagedModel& model, const HeldUnits& held, const UnitVisitor& fn);

  double last_wait_ms() const;  // waiting for activations and gradients in the last step
  double last_bubble() const;   // the last step's idle fraction (< 0: no step yet)
  // Writes the Chrome trace when PipelineOptions::trace names a file; returns a line saying so.
  std::string finish_training();
  // This rank's timeline of the steps so far.
  const pipeline::Timeline& timeline() const { return *timeline_; }
  // Writes every rank's timeline as one Chrome trace at `path` (rank 0 writes). Collective.
  void write_trace(const std::string& path);

 private:
  // The schedule's shape with one micro-batch per stage (the placement does not depend on it).
  pipeline::ScheduleShape shape() const {
    return {options_.schedule, stages(), stages(), options_.chunks};
  }

  std::shared_ptr<DeviceMesh> mesh_;
  PipelineOptions options_;
  std::shared_ptr<comm::ProcessGroup> embedding_group_;  // first and last stage
  std::vector<pipeline::BlockRange> partition_;
  std::unique_ptr<pipeline::Timeline> timeline_;
  std::unique_ptr<pipeline::StageRunner> runner_;
  int64_t steps_ = 0;
};

}  // namespace braid::parallel
