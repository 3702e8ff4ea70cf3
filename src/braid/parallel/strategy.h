// Strategy (docs/design.md "Seams for sharding, model parallelism and precision"): the one
// interface the Trainer (and later the Accelerator) talks to. A strategy decides what each rank
// holds of a declared model (its materialisation policy), hooks the model so that forward and
// backward find their parameters and gradients get reduced, produces the optimizer's slices,
// computes the exact global gradient norm over whatever is sharded, and gathers units for export.
// No strategy name appears outside parallel/: train/ builds one from a StrategySpec.
//
// The step protocol, identical on every rank (Note [Strategy step]):
//
//   strategy.zero_grad();
//   for m in 0..accum-1:
//     strategy.begin_micro_step(m, accum);
//     model.loss(batch m of this rank's data share).backward();
//     strategy.end_micro_step();
//   norm = strategy.clip_grad_norm(max_norm);   // every reduction has finished here
//   optimizer.step(lr);                          // over strategy.optimizer_slices()
//   strategy.after_optimizer_step();
//   ...
//   strategy.synchronize();                      // before reading weights outside a forward
//
// forward_backward() runs that micro-step loop (a pipeline strategy runs its schedule instead,
// with begin/end_micro_step around each backward and reduce_accumulated() at the end).
// Forward passes without gradients (evaluation, generation) go through eval_loss() and
// last_logits(): the hooks gather and free what they use. Every rank must run the same forwards
// (they may gather).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/nn/transformer.h"
#include "braid/optim/optimizer.h"

namespace braid::parallel {

struct MaterializeOptions {
  // Fills unit u of model.layout() with the full parameters of the whole model's unit
  // model.global_unit(u) (a buffer holding the unit alone, f32, at least
  // full_layout().units()[model.global_unit(u)].numel elements; padding must stay zero). Called
  // on every rank for each of its units, in order: seeded initialisation
  // (ParamLayout::init_unit) or a checkpoint reader.
  std::function<void(int unit, Tensor& unit_params)> fill;
  // The dtype forward and backward compute in (docs/design.md "Precision"): parameters are bound to
  // a compute copy in this dtype, refreshed from the f32 masters after every optimizer step;
  // gradients, masters and optimizer state stay f32.
  DType param_dtype = DType::f32;
};

// A step's micro-batches, as forward_backward() takes them.
struct MicroBatches {
  int64_t count = 1;
  // Micro-batch m's ids and targets ([B, T] i32); called once per m, in increasing m.
  std::function<std::pair<Tensor, Tensor>(int64_t m)> next;
  double denominator = 0;  // each micro-batch's summed loss is divided by it (Note [DDP averaging])
  float loss_scale = 1.0f;  // backward starts from the loss times this (fp16 loss scaling)
  // Called on this rank before micro-batch m's forward (point "forward") and its backward
  // ("backward"): fault injection and anomaly detection in tests and the Trainer.
  std::function<void(int64_t m, const char* point)> at;
};

// What forward_backward() saw: the step's summed loss (unscaled) and whether every micro-batch's
// loss was finite. The same on every rank of a data-parallel replica.
struct StepLoss {
  double sum = 0;
  bool finite = true;
};

struct StrategyStats {
  double exposed_comm_ms = 0;  // last step: time spent waiting for communication after backward
  int64_t bytes_reduced = 0;   // last step: gradient bytes this rank sent to reductions
  int64_t bytes_gathered = 0;  // last step: parameter bytes this rank gathered
  double bubble = -1;          // pipeline: the last step's idle fraction on this rank (< 0: none)
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  Strategy() = default;
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

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

  virtual void zero_grad() = 0;
  virtual void begin_micro_step(int64_t micro_step, int64_t accumulation_steps) = 0;
  virtual void end_micro_step() = 0;
  // Pipeline schedules: after backwards that ran between begin_micro_step(k, n) with k < n - 1
  // and end_micro_step() (accumulating, nothing reduced), reduces what they accumulated as the
  // last micro-step's backward would have. Every unit counts as used (Note [Pipeline reduction],
  // pipeline/pipeline_strategy.h).
  virtual void reduce_accumulated() = 0;
  // The forward and backward of every micro-batch of a step, after zero_grad() and before
  // clip_grad_norm(): here the loop of Note [Strategy step]; a pipeline strategy runs its
  // schedule. Non-virtual wrappers forward it to the strategy they wrap.
  virtual StepLoss forward_backward(nn::Transformer& model, const MicroBatches& batches);
  // The summed loss (denominator 1) of one batch, without recording (evaluation).
  virtual double eval_loss(nn::Transformer& model, const Tensor& ids, const Tensor& targets);
  // The logits [1, V] f32 of the last position of ids [1, T], without recording (generation).
  virtual Tensor last_logits(nn::Transformer& model, const Tensor& ids);
  // The exact global norm of the reduced gradients (Note [Global norm], optim/clip_grad.h), and
  // clipping to max_norm when max_norm > 0. Gradients that hold loss_scale times their value
  // (fp16 loss scaling) are unscaled in the same pass and the unscaled norm is returned (Note
  // [Unscale with the clip]). Non-finite: returned, gradients untouched.
  virtual double clip_grad_norm(double max_norm, double loss_scale = 1.0) = 0;
  virtual void after_optimizer_step() = 0;
  // Waits for everything still in flight (e.g. the exchange of updated shards that the next
  // forward would wait for); call before reading parameters outside a forward.
  virtual void synchronize() {}

  // fn(g, params): g indexes model.full_layout().units(); params is the unit's full parameters
  // (a buffer holding the unit alone; read only).
  using UnitVisitor = std::function<void(int, const Tensor&)>;
  // Collective: fn for every unit of the whole model, in order, on every rank. Export streams
  // through this, so no rank ever holds more than one gathered unit beyond what it keeps anyway.
  virtual void for_each_full_unit(const UnitVisitor& fn) = 0;
  // Collective over the ranks that hold the same units (data and tensor parallel peers): fn for
  // each of `units` (indices into model.layout(), increasing; the same list on those ranks).
  virtual void for_each_held_unit(const UnitVisitor& fn, const std::vector<int>& units) = 0;

  // Tensor parallelism: what the model must be declared with (TransformerOptions::
  // tensor_parallel) before materialize(); null without.
  virtual nn::TensorParallel* tensor_parallel() { return nullptr; }
  // Pipeline parallelism: the part of a model of this config this rank holds, which the model
  // must be declared with (TransformerOptions::pipeline) before materialize(); none without.
  virtual std::optional<nn::PipelineStage> pipeline_stage(const nn::ModelConfig& /*config*/) {
    return std::nullopt;
  }
  // Note [Model-parallel norm] (model_parallel_norm.h): the group whose ranks hold different
  // slices of the model; a model-parallel strategy sets it on the data-parallel strategy it
  // wraps, before materialize().
  void set_model_parallel_group(std::shared_ptr<comm::ProcessGroup> group) {
    model_parallel_ = std::move(group);
  }

  virtual StrategyStats last_step_stats() const { return {}; }
  // Collective, once training is over: writes what the strategy reports besides the step
  // statistics (a pipeline's Chrome trace); returns a line saying what it wrote ("": nothing).
  virtual std::string finish_training() { return ""; }
  // A line for the memory report about what the strategy keeps outside the rank's memory
  // (offloaded bytes and I/O); empty when nothing.
  virtual std::string memory_note() const { return ""; }

 protected:
  comm::ProcessGroup* model_parallel_group() const { return model_parallel_.get(); }

 private:
  std::shared_ptr<comm::ProcessGroup> model_parallel_;
};

// The model as a Transformer, for what only a transformer can be split by (`what`: "tensor
// parallelism", "pipeline parallelism"); throws naming it for any other model.
nn::Transformer& transformer_for(nn::Model& model, const char* what);

// 0, 1, ..., layout.units().size() - 1: every unit, for Strategy::for_each_held_unit.
std::vector<int> all_units(const nn::ParamLayout& layout);

}  // namespace braid::parallel
