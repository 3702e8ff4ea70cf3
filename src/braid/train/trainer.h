// Trainer: one rank's training run, from a TrainConfig. Builds the model, optimizer,
// strategy (none or DDP over `world`) and data, then runs the step loop with gradient
// accumulation, clipping, the LR schedule, periodic validation, progress reporting (rank 0),
// the final HF export and samples.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/core/memory_tracker.h"
#include "braid/nn/transformer.h"
#include "braid/optim/optimizer.h"
#include "braid/parallel/ddp/distributed_data_parallel.h"
#include "braid/train/batch_source.h"
#include "braid/train/config.h"

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
  double peak_gflops = 0;          // measured GEMM peak, summed over ranks (Note [Peak twice])
  int64_t peak_tracked_bytes = 0;  // this rank's MemoryTracker peak
  double exposed_comm_ms = 0;      // DDP: median per-step wait for communication
};

struct TrainerOptions {
  bool quiet = false;        // no progress output (tests)
  bool measure_peak = true;  // time a GEMM for the MFU denominator
};

class Trainer {
 public:
  // world may be null (one process). The config's batch arithmetic is resolved against the
  // data-parallel size here.
  Trainer(TrainConfig config, std::shared_ptr<comm::ProcessGroup> world,
          TrainerOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  TrainResult run();
  // Mean validation loss over eval_batches of the validation split (all ranks).
  double evaluate();

  nn::Transformer& model() { return *model_; }
  const TrainConfig& config() const { return cfg_; }
  const std::shared_ptr<MemoryTracker>& memory() const { return tracker_; }
  int rank() const { return world_ ? world_->rank() : 0; }
  int world_size() const { return world_ ? world_->size() : 1; }

 private:
  void build_model();
  void build_optimizer();
  void build_data();
  double all_reduce_sum(double v);
  void finish(TrainResult& result);

  TrainConfig cfg_;
  std::shared_ptr<comm::ProcessGroup> world_;
  TrainerOptions options_;
  std::shared_ptr<MemoryTracker> tracker_;
  std::unique_ptr<nn::Transformer> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<parallel::DistributedDataParallel> ddp_;
  std::unique_ptr<BatchSource> train_data_;
  std::unique_ptr<BatchSource> val_data_;
};

// Builds the model a config names (preset, config.json, or an HF dir to start from).
nn::ModelConfig model_config_from(const TrainConfig& cfg);

}  // namespace braid::train
