// Trainer: one rank's training run, from a TrainConfig; a user of the Accelerator
// (accelerator.h), which makes the world, the memory budget and the parallel runtime,
// materialises the declared model, builds the optimizer, and whose train_step() is every step
// (Note [One step path]: the micro-steps or pipeline schedule, clipping, loss scaling, the
// non-finite policy, the update). The Trainer reads this rank's data share, then runs the step
// loop with the LR schedule's step index, periodic validation, checkpoints, progress reporting
// (rank 0), the final HF export and samples; it calls no parallel-runtime method itself.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "braid/checkpoint/checkpoint_reader.h"
#include "braid/checkpoint/checkpoint_writer.h"
#include "braid/comm/process_group.h"
#include "braid/config/config.h"
#include "braid/core/memory_tracker.h"
#include "braid/nn/transformer.h"
#include "braid/optim/optimizer.h"
#include "braid/train/accelerator.h"
#include "braid/train/anomaly.h"
#include "braid/train/batch_source.h"
#include "braid/train/metrics_log.h"
#include "braid/train/progress.h"

namespace braid::train {

struct TrainResult {
  int64_t steps = 0;
  double first_loss = NAN;  // global mean train loss of the first step
  double last_loss = NAN;
  double first_val_loss = NAN;  // validation loss before training / at the end
  double last_val_loss = NAN;
  double tokens_per_s = 0;  // all ranks, median step after warm-up
  double step_ms = 0;       // median
  double mfu = 0;
  double peak_gflops = 0;  // the GEMM peak MFU is against, summed over ranks (Note [MFU peak])
  int64_t peak_tracked_bytes = 0;  // this rank's MemoryTracker peak
  double exposed_comm_ms = 0;      // median per-step wait for communication
  double bubble = -1;              // pipeline: median idle fraction of a step, mean over ranks
  int64_t resumed_from = -1;       // the step of the checkpoint this run resumed from, or -1
  int64_t checkpoints_saved = 0;
  int64_t skipped_steps = 0;  // steps skipped for inf/nan (fp16 overflows, on_nonfinite: skip)
  double checkpoint_s = 0;    // time training waited for checkpoint saves
};

struct TrainerOptions {
  bool quiet = false;        // no progress output and no metrics log (tests)
  bool measure_peak = true;  // time a GEMM for the MFU denominator
  // Tests: called at each point of a step ("forward" and "backward" of micro-step 0,
  // "optimizer") and of a checkpoint save ("save:" + checkpoint::SaveRequest::fault's stage),
  // with the step being taken or saved (1-based); throwing from it fails the run there.
  std::function<void(int64_t step, const std::string& point)> fault;
  // Tests: true for a step (1-based) makes this rank's first micro-batch of it carry a NaN
  // (NanInjector, anomaly.h).
  std::function<bool(int64_t step)> inject_nan;
  // Tests: the checkpoint format saves write (checkpoint::SaveRequest's version and
  // block_bytes; 0: the current format).
  int checkpoint_version = 0;
  int64_t checkpoint_block_bytes = 0;
};

class Trainer {
 public:
  // world may be null (one process). The config's batch arithmetic is resolved against the
  // data-parallel size here.
  Trainer(config::TrainConfig config, std::shared_ptr<comm::ProcessGroup> world,
          TrainerOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  TrainResult run();
  // Mean validation loss over eval_batches of the validation split (all ranks).
  double evaluate();
  // The logits of the last position of ids [1, T] (host tokens), from the model where it trains
  // (training.device) and through every parallelism, on the host: what sample() (generate.h)
  // reads. Every rank calls it in lockstep.
  Tensor last_logits(const Tensor& ids);

  nn::Transformer& model() { return *model_; }
  Accelerator& accelerator() { return *acc_; }
  // Bytes this rank read from the checkpoint it resumed from (0: none).
  int64_t checkpoint_bytes_read() const { return checkpoint_bytes_read_; }
  // The whole model's parameters in one f32 tensor in the model's flat layout (padding to
  // ParamLayout::kAlign), gathered unit by unit from whatever this rank holds. Collective.
  Tensor gather_parameters();
  const config::TrainConfig& config() const { return cfg_; }
  const std::shared_ptr<MemoryTracker>& memory() const { return tracker_; }
  int rank() const { return world_ ? world_->rank() : 0; }
  int world_size() const { return world_ ? world_->size() : 1; }
  // Where the model trains (training.device resolved: cuda is the local rank's cuda:N).
  Device device() const { return device_; }
  // The group the parallel runtime runs over: the device's own (Note [Device groups]) or the
  // world (null for one process).
  const comm::ProcessGroup* runtime_world() const {
    return runtime_world_ ? runtime_world_.get() : world_.get();
  }
  int dp_rank() const { return acc_->dp_rank(); }
  int dp_size() const { return acc_->dp_size(); }
  // The first step this run takes (the resumed checkpoint's step, else 0).
  int64_t start_step() const { return start_step_; }
  // Saves a training checkpoint of the state after `step` steps (with checkpoint.async, starts
  // it; it is finished at a later step boundary or the end of run()). Collective.
  void save_checkpoint(int64_t step, TrainResult* result = nullptr);

 private:
  // The runtime for cfg_ (acc_, the device, the output paths checked); cfg_ becomes resolved.
  void start_runtime();
  void build_model(const checkpoint::CheckpointReader* from);  // from: null, or a checkpoint
  std::string memory_advice() const;
  void freeze_parameters();
  void build_data();
  // Finds the checkpoint to resume from and loads it (load_checkpoint); `given` is the config
  // as the Trainer was given it, for a runtime started afresh.
  void open_resume(const config::TrainConfig& given);
  void load_checkpoint(const checkpoint::CheckpointReader& from, const config::TrainConfig& given);
  void report_resume() const;  // the line saying where the run resumes (rank 0)
  void restore_counters();
  // A line on rank 0's progress (not when quiet).
  void say(const std::string& line) const;
  void fault(int64_t step, const char* point) const {
    if (options_.fault) options_.fault(step, point);
  }
  void report_saved(const checkpoint::SaveResult& r, TrainResult* result) const;
  // With checkpoint.async: finishes a pending save whose writes are done (or waits for them).
  // Collective; the time it takes counts as time training waited for saves.
  void poll_async_save(bool wait, TrainResult& result);
  double all_reduce_sum(double v);
  double sum_over_replicas(double v);
  int64_t counted_over_replicas(int64_t n);  // a count every rank of a replica holds, summed
  void finish(TrainResult& result);
  // Note [Metrics log] (metrics_log.h): rank 0's lines; the step line gathers every rank's step
  // time, and the end adds a pipeline's last step. Collective where it gathers.
  void log_step(const StepStats& s, double step_s, int64_t skipped);
  void log_end(const TrainResult& r);

  config::TrainConfig cfg_;
  std::shared_ptr<comm::ProcessGroup> world_;
  // The parallel runtime's group where it is not world_: the device's own (Note [Device groups]).
  std::shared_ptr<comm::ProcessGroup> runtime_world_;
  TrainerOptions options_;
  std::shared_ptr<MemoryTracker> tracker_;  // the Accelerator's
  std::unique_ptr<Accelerator> acc_;        // runtime, optimizer, fp16 loss scaler
  Device device_;  // training.device: where the model lives and computes (Note [Training device])
  std::unique_ptr<nn::Transformer> model_;
  std::unique_ptr<BatchSource> train_data_;
  std::unique_ptr<BatchSource> val_data_;
  std::unique_ptr<checkpoint::CheckpointReader> resume_;  // until the state is restored
  std::unique_ptr<checkpoint::AsyncSaver> async_save_;    // checkpoint.async
  std::unique_ptr<AnomalyDetector> anomaly_;              // training.detect_anomaly
  std::unique_ptr<NanInjector> nan_injector_;             // options.inject_nan
  std::unique_ptr<MetricsLog> metrics_;                   // rank 0, unless quiet
  int64_t start_step_ = 0;
  int64_t val_batches_ = 0;  // validation batches read so far (each rank)
  int64_t checkpoint_bytes_read_ = 0;
};

// Builds the model a config names (preset, config.json, or an HF dir to start from).
nn::ModelConfig model_config_from(const config::TrainConfig& cfg);

}  // namespace braid::train
