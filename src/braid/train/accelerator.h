// Accelerator: braid as a library, in the spirit of HuggingFace Accelerate, and the one step path
// of every training run (Note [One step path]). Built from any of the configs (braid YAML,
// DeepSpeed JSON, Accelerate YAML: load_run_config), it makes this process's world (the ranks
// `braid launch`, mpirun or srun started, or one process), its memory tracker and the parallel
// runtime the config's parallel section plans (parallel::parallelize: the one mesh, data, tensor
// and pipeline parallelism), and then prepares what a training loop uses. Two ways to step:
//
//   // a model whose forward the runtime runs (an nn::StagedModel, e.g. the Transformer; any
//   // layout, pipelines included):
//   braid::train::Accelerator acc(braid::train::load_run_config({.yaml = "run.yaml"}));
//   nn::Transformer model(cfg, acc.model_options());   // this rank's tp slices, declared only
//   acc.prepare(model);  acc.prepare_optimizer();
//   for (...) acc.train_step(model, micro_batches);        // zero_grad ... optimizer step
//
//   // a user's own forward (an nn::Model: modules, parameters, declare_units()), as Accelerate:
//   MyModel model(acc.compute_dtype());
//   acc.prepare(model);                    // materialised as the plan says, initialised
//   optim::Optimizer& opt = acc.prepare_optimizer();   // the config's optimizer and schedule
//   data::DistributedSampler sampler = acc.prepare_sampler(num_samples);  // this rank's share
//   for (...) {
//     acc.accumulate();                    // before the forward: micro-step k of accumulation
//     acc.backward(model.loss(x, y));      // the mean loss of this rank's micro-batch
//     if (acc.sync_gradients()) { acc.clip_grad_norm(1.0); acc.step(); }
//   }
//   acc.save_state(dir);  acc.load_state(dir);
//
// Every call the runtime makes collective (prepare, train_step, backward at a reducing
// micro-step, clip_grad_norm, step, save_state, load_state, gather) must be made by every rank in
// the same order. The Trainer is a user of it (trainer.h) and calls no runtime method itself.
//
// Note [One step path]: zero-grad, the micro-step loop or pipeline schedule, the global norm and
// clipping, fp16 loss scaling, the non-finite policy and the optimizer update are written once,
// here: train_step() runs them all, and accumulate()/backward()/clip_grad_norm()/step() are the
// same pieces driven by a user's loop.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "braid/autograd/variable.h"
#include "braid/checkpoint/checkpoint_writer.h"
#include "braid/checkpoint/manifest.h"
#include "braid/comm/process_group.h"
#include "braid/config/config.h"
#include "braid/core/memory_tracker.h"
#include "braid/data/data_loader.h"
#include "braid/data/distributed_sampler.h"
#include "braid/nn/model.h"
#include "braid/nn/transformer.h"
#include "braid/optim/loss_scaler.h"
#include "braid/optim/lr_schedule.h"
#include "braid/optim/optimizer.h"
#include "braid/parallel/parallelism.h"

namespace braid::train {

// Where a run's config comes from: braid's YAML, then (at most one of) a DeepSpeed JSON or an
// Accelerate YAML for the distribution, then `section.key=value` overrides. The dialects' batch
// arithmetic counts `launched_ranks` (0: the ranks this job was launched with).
struct RunConfigSources {
  std::string yaml;
  std::string deepspeed;
  std::string accelerate;
  std::vector<std::string> overrides;
  int64_t launched_ranks = 0;
};
// The resolved config; `mapping` (may be null) gets what the dialect file became ("" without),
// `origins` (may be null) where each value came from (config/provenance.h).
config::TrainConfig load_run_config(const RunConfigSources& sources, std::string* mapping = nullptr,
                                    config::Provenance* origins = nullptr);

// The world this process was launched into: comm::init_world() with the config's
// parallel.comm_timeout_s and comm_debug (the ranks of `braid launch`, mpirun or srun, else one
// process).
std::shared_ptr<comm::ProcessGroup> launched_world(const config::TrainConfig& config = {});

class Accelerator {
 public:
  // The world this process was launched into (comm::init_world() with the config's timeout and
  // debug settings: the ranks of `braid launch`, mpirun or srun, else one process). Validates
  // the config, checks every rank has the same one, resolves its batch arithmetic against the
  // plan's data-parallel size and sets this rank's memory budget (memory.budget).
  explicit Accelerator(config::TrainConfig config);
  // The same over `world` (null: one process, no collectives), charging `tracker` (null: its
  // own; a caller passes one to read it even when construction fails).
  Accelerator(config::TrainConfig config, std::shared_ptr<comm::ProcessGroup> world,
              std::shared_ptr<MemoryTracker> tracker = nullptr);
  ~Accelerator();
  Accelerator(const Accelerator&) = delete;
  Accelerator& operator=(const Accelerator&) = delete;

  int process_index() const { return world_ ? world_->rank() : 0; }
  int num_processes() const { return world_ ? world_->size() : 1; }
  bool is_main_process() const { return process_index() == 0; }
  // This rank's share of the data: share dp_rank() of dp_size().
  int dp_rank() const { return parallelism_->dp_rank(); }
  int dp_size() const { return parallelism_->dp_size(); }
  // The ranks whose losses add up to one replica's loss: dp x cp (Note [Context-parallel
  // layout]: a cp rank's loss covers its tokens).
  int loss_shares() const { return parallelism_->loss_shares(); }
  const config::TrainConfig& config() const { return cfg_; }
  // The dtype forward and backward compute in (training.precision): a prepared model's
  // parameters are in it, so a model casts its floating-point input to it (autograd::cast), as
  // autocast would.
  DType compute_dtype() const { return cfg_.compute_dtype(); }
  const std::shared_ptr<comm::ProcessGroup>& world() const { return world_; }
  // The parallel runtime (parallel/parallelism.h), for what the Accelerator does not say itself.
  parallel::Parallelism& parallelism() { return *parallelism_; }
  // "zero3 (FULL_SHARD) over dp=2 ... x tp=2 x pp=2 (1f1b, ...)"
  std::string describe() const { return parallelism_->describe(); }
  const std::shared_ptr<MemoryTracker>& memory() const { return tracker_; }
  optim::LossScaler* loss_scaler() const { return scaler_.get(); }  // fp16 only

  // How a Transformer is declared for prepare(): not materialised, with this rank's
  // tensor-parallel slices (a pipeline splits the model declared whole in prepare()).
  nn::TransformerOptions model_options();

  // Materialises the declared model as the plan says, in training.precision, and hooks it.
  // fill(u, unit) fills unit u of model.layout() with the whole unit, as one process holds it
  // (MaterializeOptions::fill); by default each unit is initialised from training.seed
  // (ParamLayout::init_unit). Collective.
  // fill_range: parallel::MaterializeOptions::fill_range (with fill; a checkpoint load).
  void prepare(nn::Model& model, std::function<void(int, Tensor&)> fill = {},
               std::function<void(int, int64_t, int64_t, Tensor)> fill_range = {});
  // The config's optimizer (AdamW or SGD, weight decay on matrices only) over this rank's
  // slices, and its LR schedule. After prepare(). Collective (every rank allocates its state).
  optim::Optimizer& prepare_optimizer();
  // Which samples this rank reads: a sampler over the data-parallel ranks (not the world: the
  // ranks of a tensor- or pipeline-parallel group read the same data).
  data::DistributedSampler prepare_sampler(int64_t num_samples,
                                           data::SamplerOptions options = {}) const;

  // A loader over dir/<split>_*.bin token shards (braid prepare-data) reading this rank's share:
  // options.world and rank become the data-parallel ones, batch_size training.micro_batch_size,
  // and seed 0 training.seed.
  std::unique_ptr<data::DataLoader> prepare_data_loader(const std::string& dir,
                                                        const std::string& split,
                                                        data::DataLoaderOptions options) const;

  // One optimizer step of a model whose forward the runtime runs (Note [One step path]):
  // zero-grad, the micro-step loop or the pipeline schedule over `batches` (their loss_scale is
  // set here under fp16), the norm (clipping to optimizer.grad_clip), fp16 loss scaling, the
  // non-finite policy (training.on_nonfinite, Note [Non-finite steps]) and the optimizer update.
  // A non-finite step under on_nonfinite: stop throws its one line on every rank. Collective.
  struct StepHooks {
    // This rank's own first non-finite value this step ("": none seen; the anomaly detector).
    std::function<std::string()> first_nonfinite;
    // Called just before the optimizer update (fault injection in tests).
    std::function<void()> before_update;
  };
  struct StepResult {
    double loss = 0;        // the step's summed loss on this rank (unscaled)
    bool finite = true;     // every micro-batch's loss was finite here
    double grad_norm = -1;  // unscaled; -1 when nothing computed it
    double lr = 0;          // the learning rate of this step
    bool updated = false;   // the optimizer stepped
    std::string skipped;    // why it did not: the line naming the step's first inf/nan
  };
  // step: the 0-based index of this step in the run's schedule (its learning rate; a resumed
  // run's first step is the checkpoint's; skipped steps count).
  StepResult train_step(nn::StagedModel& model, parallel::MicroBatches batches, int64_t step,
                        const StepHooks& hooks = {});
  int64_t skipped_steps() const { return skipped_steps_; }  // non-finite steps skipped so far
  // The last step's communication statistics (waits, bytes, a pipeline's bubble).
  parallel::ParallelStats last_step_stats() const { return parallelism_->last_step_stats(); }
  // The summed loss (denominator 1) of a batch, without recording; the logits [1, V] of the last
  // position of ids [1, T] (generation). Collective (a sharded model gathers). positions: packed
  // rows' (Note [Packed rows], nn/sequence_layout.h), or undefined.
  double eval_loss(nn::StagedModel& model, const Tensor& ids, const Tensor& targets,
                   const Tensor& positions = Tensor());
  Tensor last_logits(nn::Transformer& model, const Tensor& ids);
  // fn(g, unit g whole) for every unit of the whole model, in order (export). Collective.
  void for_each_full_unit(const parallel::Parallelism::UnitVisitor& fn);
  // Once training is over: writes what the runtime reports (a pipeline's trace); a line saying
  // what it wrote, or "". Collective.
  std::string finish_training() { return parallelism_->finish_training(); }
  // Waits for what the runtime still has in flight; before reading weights outside a forward.
  void synchronize() { parallelism_->synchronize(); }

  // Before a micro-batch's forward: starts micro-step k of training.gradient_accumulation_steps
  // (the first one of an optimizer step zeroes the gradients). Reductions run only in the last
  // one, unless the plan reduces every micro-step (no_sync inside). Not for a pipelined model
  // (its forward runs inside the schedule): train_step().
  struct MicroStep {
    int64_t index = 0;
    int64_t count = 1;
    bool last() const { return index + 1 == count; }
  };
  MicroStep accumulate();
  // Backward from `loss`, the mean loss of this rank's micro-batch: its gradient is scaled so
  // that the reduced gradients are those of the mean over the global batch (every rank's
  // micro-batches of the step), times the fp16 loss scale. Ends the micro-step (without an
  // accumulate() before the forward, this backward is a whole step's only micro-step).
  void backward(const autograd::Variable& loss);
  // Whether the last backward completed an optimizer step's micro-steps.
  bool sync_gradients() const { return sync_gradients_; }
  // The exact global gradient norm (unscaled under fp16), clipping to max_norm when > 0.
  // Collective; call once per optimizer step, after the last backward, before step().
  double clip_grad_norm(double max_norm);
  // The optimizer update with this step's learning rate, when sync_gradients(); then the
  // runtime refreshes what it holds. Under fp16 an overflowing step is skipped and the scale
  // backs off (returns false). Collective.
  bool step();
  int64_t completed_steps() const { return optimizer_ ? optimizer_->step_count() : 0; }
  double learning_rate() const;  // for the next step()
  optim::Optimizer& optimizer();
  const optim::LrSchedule& schedule() const { return schedule_; }

  // A training checkpoint of the model, the optimizer and `counters` after completed_steps()
  // steps in root/step_<n> (checkpoint/checkpoint_writer.h): any layout loads it. Collective.
  checkpoint::SaveResult save_state(const std::filesystem::path& root,
                                    std::map<std::string, int64_t> counters = {});
  // What save_state() asks the writer for, after `step` steps (for a caller that saves in the
  // background, checkpoint::AsyncSaver); the runtime must be synchronized.
  checkpoint::SaveRequest save_request(const std::filesystem::path& root, int64_t step,
                                       std::map<std::string, int64_t> counters);
  // Reads a checkpoint directory (a step directory, or a root: its newest valid one) into the
  // prepared model and optimizer, whatever layout saved it. Returns its counters. Collective.
  std::map<std::string, int64_t> load_state(const std::filesystem::path& dir);

  // The fp16 loss scaler's state from a checkpoint's counters (nothing without fp16; throws
  // when the checkpoint has none: it was saved with another precision).
  void restore_loss_scale(const checkpoint::Manifest& manifest);

  // Prints a line on the main process only.
  void print(const std::string& line) const;
  // Every rank's values, concatenated in rank order (metrics). Collective.
  std::vector<float> gather(const std::vector<float>& values) const;
  // The mean over ranks of v (a metric). Collective.
  double reduce_mean(double v) const;
  void wait_for_everyone() const;

  // The whole model's parameters (f32, full_layout()'s flat order) gathered unit by unit from
  // whatever this rank holds. Collective.
  Tensor gather_parameters(const nn::Model& model);

 private:
  double loss_scale() const { return scaler_ ? scaler_->scale() : 1.0; }
  // After a step's backwards: the norm where something needs it, the fp16 scaler and the
  // non-finite policy (Note [Non-finite steps]), then the update. Fills grad_norm, updated,
  // skipped. Collective.
  void finish_step(int64_t step, StepResult& r, const StepHooks& hooks);
  // The one line naming where the step's first inf/nan appeared, over every rank. Collective.
  std::string locate_nonfinite(const std::string& mine, bool local_loss_finite, double gnorm);

  config::TrainConfig cfg_;
  std::shared_ptr<comm::ProcessGroup> world_;
  std::shared_ptr<MemoryTracker> tracker_;
  std::unique_ptr<parallel::Parallelism> parallelism_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::LossScaler> scaler_;  // fp16
  optim::LrSchedule schedule_;
  nn::Model* model_ = nullptr;
  int64_t micro_ = 0;  // the next micro-step of the current optimizer step
  bool in_micro_step_ = false;
  bool sync_gradients_ = false;
  double grad_norm_ = -1;      // this step's, once clip_grad_norm ran
  int64_t skipped_steps_ = 0;  // non-finite steps skipped so far
};

}  // namespace braid::train
