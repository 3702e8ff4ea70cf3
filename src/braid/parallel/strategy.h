// Strategy (DESIGN.md "Seams for sharding, model parallelism and precision"): the one interface
// the Trainer (and later the Accelerator) talks to. A strategy decides what each rank holds of
// a declared model (its materialisation policy), hooks the model so that forward and backward
// find their parameters and gradients get reduced, produces the optimizer's slices, computes
// the exact global gradient norm over whatever is sharded, and gathers units for export. No
// strategy name appears outside parallel/: train/ builds one from a StrategySpec.
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
// Forward passes without gradients (evaluation, generation) need no call: the hooks gather
// and free what they use. Every rank must run the same forwards (they may gather).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/nn/transformer.h"
#include "braid/optim/optimizer.h"

namespace braid::parallel {

struct MaterializeOptions {
  // Fills unit u's full parameters (a buffer holding the unit alone, f32, at least
  // layout.units()[u].numel elements; padding must stay zero). Called on every rank for every
  // unit, in order: seeded initialisation (ParamLayout::init_unit) or a checkpoint reader.
  std::function<void(int unit, Tensor& unit_params)> fill;
  // The dtype forward and backward compute in (DESIGN.md "Precision"): parameters are bound to
  // a compute copy in this dtype, refreshed from the f32 masters after every optimizer step;
  // gradients, masters and optimizer state stay f32.
  DType param_dtype = DType::f32;
};

struct StrategyStats {
  double exposed_comm_ms = 0;  // last step: time spent waiting for communication after backward
  int64_t bytes_reduced = 0;   // last step: gradient bytes this rank sent to reductions
  int64_t bytes_gathered = 0;  // last step: parameter bytes this rank gathered
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
  virtual void materialize(nn::Transformer& model, const MaterializeOptions& options) = 0;
  // The slices this rank's optimizer steps (master parameters and their reduced gradients).
  virtual std::vector<optim::ParamSlice> optimizer_slices() = 0;
  // Where the optimizer keeps its state for those slices (null: in memory). Pass it to the
  // optimizer's constructor, so no in-memory state is ever allocated when it is offloaded.
  virtual std::unique_ptr<optim::StateStore> optimizer_state_store() { return nullptr; }

  virtual void zero_grad() = 0;
  virtual void begin_micro_step(int64_t micro_step, int64_t accumulation_steps) = 0;
  virtual void end_micro_step() = 0;
  // The exact global norm of the reduced gradients (Note [Global norm], optim/clip_grad.h), and
  // clipping to max_norm when max_norm > 0. Gradients that hold loss_scale times their value
  // (fp16 loss scaling) are unscaled in the same pass and the unscaled norm is returned (Note
  // [Unscale with the clip]). Non-finite: returned, gradients untouched.
  virtual double clip_grad_norm(double max_norm, double loss_scale = 1.0) = 0;
  virtual void after_optimizer_step() = 0;
  // Waits for everything still in flight (e.g. the exchange of updated shards that the next
  // forward would wait for); call before reading parameters outside a forward.
  virtual void synchronize() {}

  // Collective: fn(u, params) for every unit in order on every rank, with the unit's full
  // parameters (a buffer holding the unit alone; read only). Export streams through this, so no
  // rank ever holds more than one gathered unit beyond what it keeps anyway.
  virtual void for_each_full_unit(const std::function<void(int, const Tensor&)>& fn) = 0;

  // Tensor parallelism: what the model must be declared with (TransformerOptions::
  // tensor_parallel) before materialize(); null without.
  virtual nn::TensorParallel* tensor_parallel() { return nullptr; }
  // Note [Model-parallel norm] (model_parallel_norm.h): the group whose ranks hold different
  // slices of the model; a model-parallel strategy sets it on the data-parallel strategy it
  // wraps, before materialize().
  void set_model_parallel_group(std::shared_ptr<comm::ProcessGroup> group) {
    model_parallel_ = std::move(group);
  }

  virtual StrategyStats last_step_stats() const { return {}; }
  // A line for the memory report about what the strategy keeps outside the rank's memory
  // (offloaded bytes and I/O); empty when nothing.
  virtual std::string memory_note() const { return ""; }

 protected:
  comm::ProcessGroup* model_parallel_group() const { return model_parallel_.get(); }

 private:
  std::shared_ptr<comm::ProcessGroup> model_parallel_;
};

}  // namespace braid::parallel
