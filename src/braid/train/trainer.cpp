#include "braid/train/trainer.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <sstream>
#include <string_view>

#include "braid/autograd/functions.h"
#include "braid/autograd/variable.h"
#include "braid/comm/collective_guard.h"
#include "braid/comm/gather_strings.h"
#include "braid/comm/world.h"
#include "braid/config/config_agreement.h"
#include "braid/core/error.h"
#include "braid/kernels/ops.h"
#include "braid/launch/threads.h"
#include "braid/optim/clip_grad.h"
#include "braid/optim/lr_schedule.h"
#include "braid/optim/param_groups.h"
#include "braid/train/mfu_peak.h"
#include "braid/train/plan_config.h"
#include "braid/train/progress.h"
#include "braid/train/step_profile.h"
#include "braid/train/trainer_output.h"
#include "braid/train/training_device.h"

namespace braid::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {
// Median of per-step values after warm-up (the first steps allocate and fault pages in).
double steady_median(std::vector<double> v) {
  v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(2, v.size() / 2)));
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

nn::ModelConfig model_config_from(const config::TrainConfig& cfg) {
  nn::ModelConfig mc;
  std::error_code ec;
  if (!cfg.model.init_from.empty()) {
    BRAID_CHECK(fs::is_directory(cfg.model.init_from, ec), "model.init_from '", cfg.model.init_from,
                "' is not a directory (an HF model directory: model.safetensors + config.json)");
    mc = nn::ModelConfig::from_hf_file(fs::path(cfg.model.init_from) / "config.json");
  } else if (!cfg.model.config.empty()) {
    if (fs::is_directory(cfg.model.config, ec)) {
      const fs::path inside = fs::path(cfg.model.config) / "config.json";
      BRAID_THROW("model.config '", cfg.model.config,
                  "' is a directory, not an HF config.json file",
                  fs::is_regular_file(inside, ec) ? " (did you mean '" + inside.string() + "'?)"
                                                  : std::string());
    }
    try {
      mc = nn::ModelConfig::from_hf_file(cfg.model.config);
    } catch (const Error& e) {
      BRAID_THROW("model.config: ", e.what());
    }
  } else {
    mc = nn::ModelConfig::preset(cfg.model.preset);
  }
  mc.activation_checkpointing = config::checkpoint_policy(cfg);
  BRAID_CHECK(cfg.data.seq_len <= mc.max_seq_len, "data.seq_len ", cfg.data.seq_len,
              " exceeds the model's maximum sequence length ", mc.max_seq_len);
  return mc;
}

namespace {

// The GEMM peak MFU is reported against: this rank's CPU cores, or its device (a GPU reaches its
// peak only on large products).
Tensor on(Device device, const Tensor& t) {
  return device.is_cpu() ? t : t.to(device);
}

}  // namespace

Trainer::Trainer(config::TrainConfig config, std::shared_ptr<comm::ProcessGroup> world,
                 TrainerOptions options)
    : cfg_(std::move(config)),
      world_(std::move(world)),
      options_(options),
      tracker_(std::make_shared<MemoryTracker>("cpu (rank " +
                                               std::to_string(world_ ? world_->rank() : 0) + ")")) {
  config::validate(cfg_);
  MemoryScope scope(tracker_);
  const config::TrainConfig given = cfg_;
  try {
    start_runtime();
    open_resume(given);  // a checkpoint found is loaded here: the model, the optimizer state
    if (resume_) {
      report_resume();  // after materialising: describe() names the buckets
    } else {
      DeviceScope on_device(device_);  // Note [Training device]
      build_model(nullptr);
      acc_->prepare_optimizer();
    }
  } catch (const OutOfMemory& e) {
    throw OutOfMemory(std::string(e.what()) + " " + memory_advice());
  }
  build_data();
  // The injector's hook first, so the detector's sees what it injected.
  if (options_.inject_nan) nan_injector_ = std::make_unique<NanInjector>(*model_);
  if (cfg_.training.detect_anomaly) anomaly_ = std::make_unique<AnomalyDetector>(*model_);
  if (resume_) restore_counters();
  resume_.reset();
}

void Trainer::say(const std::string& line) const {
  if (rank() == 0 && !options_.quiet) std::printf("%s\n", line.c_str());
}

namespace {

// v summed over every rank of world, as a one-element T tensor.
template <typename T>
T world_sum(comm::ProcessGroup& world, T v, DType dtype) {
  Tensor t = Tensor::empty(Shape{1}, dtype, MemCategory::communication,
                           MemoryScope::current_tracker(), Device::cpu());
  t.data<T>()[0] = v;
  world.all_reduce(t)->wait();
  return t.data<T>()[0];
}

}  // namespace

Tensor Trainer::last_logits(const Tensor& ids) {
  DeviceScope on_device(device_);  // Note [Training device]
  return acc_->last_logits(*model_, on(device_, ids)).to(Device::cpu());
}

double Trainer::all_reduce_sum(double v) {
  if (world_size() == 1) return v;
  return world_sum(*world_, static_cast<float>(v), DType::f32);
}

// Every rank of a data-parallel replica reads the replica's batches: the world's sum counts each
// world / dp times. Exact (integers).
int64_t Trainer::counted_over_replicas(int64_t n) {
  if (world_size() == 1) return n;
  return world_sum(*world_, n, DType::i64) / (world_size() / dp_size());
}

// Losses are the same on every model-parallel rank of a data-parallel replica, and split over
// its cp ranks (each its tokens'): the world's sum counts each share world / (dp x cp) times.
double Trainer::sum_over_replicas(double v) {
  return all_reduce_sum(v) / static_cast<double>(world_size() / acc_->loss_shares());
}

double Trainer::evaluate() {
  if (!val_data_) return NAN;
  MemoryScope scope(tracker_);
  autograd::NoGradGuard no_grad;
  double sum = 0, count = 0;
  for (int64_t i = 0; i < cfg_.training.eval_batches; ++i) {
    data::Batch b = val_data_->next();
    DeviceScope on_device(device_);  // Note [Training device]
    sum += acc_->eval_loss(*model_, on(device_, b.inputs), on(device_, b.targets), b.positions);
    // This rank's share of the tokens (its cp share; the loss above is its tokens' sum).
    count += static_cast<double>(b.counted * dp_size()) / acc_->loss_shares();
    ++val_batches_;
  }
  sum = sum_over_replicas(sum);
  count = sum_over_replicas(count);
  return sum / count;
}

TrainResult Trainer::run() {
  MemoryScope scope(tracker_);
  launch::apply_threads_per_rank();
  const auto& t = cfg_.training;
  const int64_t T = cfg_.data.seq_len;
  const int64_t accum = t.gradient_accumulation_steps;
  const double tokens_per_step = static_cast<double>(t.global_batch_size * T);
  const bool printer = rank() == 0 && !options_.quiet;
  Progress progress(printer, comm::launched_world_size() > 0);
  TrainResult result;

  const double flops_tok = model_->config().flops_per_token(T);  // Note [MFU formula]
  // Note [MFU peak]: one peak for the progress lines and the summary.
  MfuPeak peak;
  if (options_.measure_peak) {
    peak = mfu_peak(device_, cfg_.compute_dtype(), launch::local_world_size());
    result.peak_gflops = all_reduce_sum(peak.gflops);
  }

  progress.header(describe_run(cfg_, *model_, *acc_, world_size(),
                               world_ ? world_->placement() : "", result.peak_gflops, flops_tok,
                               peak));
  if (!options_.quiet) {
    comm::all_ranks_or_throw(world_.get(), [&] {
      if (rank() != 0) return;
      metrics_ = std::make_unique<MetricsLog>(fs::path(cfg_.output.dir) / "metrics.jsonl",
                                              /*append=*/start_step_ > 0);
      metrics_->write(MetricsLine("run")
                          .add("time", static_cast<int64_t>(std::time(nullptr)))
                          .add("model", model_->config().summary())
                          .add("layout", acc_->describe())
                          .add("world_size", static_cast<int64_t>(world_size()))
                          .add("max_steps", t.max_steps)
                          .add("start_step", start_step_)
                          .add("tokens_per_step", tokens_per_step)
                          .add("peak_gflops", result.peak_gflops));
    });
  }
  result.resumed_from = start_step_ > 0 ? start_step_ : -1;
  if (val_data_ && t.eval_interval > 0 && start_step_ == 0) {
    result.first_val_loss = evaluate();
    progress.message("step 0 | val loss " + format_loss(result.first_val_loss));
  }

  std::vector<double> step_times, exposed_ms, bubbles;
  const auto train_start = Clock::now();
  StepProfile profile(cfg_.output.profile);
  const int64_t interval = cfg_.checkpoint.interval;
  Accelerator::StepHooks hooks;
  if (anomaly_) hooks.first_nonfinite = [this] { return anomaly_->first(); };
  for (int64_t step = start_step_; step < t.max_steps; ++step) {
    profile.begin_step(step - start_step_);
    auto t0 = Clock::now();
    if (anomaly_) anomaly_->begin_step();
    parallel::MicroBatches batches;
    batches.count = accum;
    batches.denominator = tokens_per_step;
    // Masked targets (Note [Token flags]): the step's micro-batches are read first, so the loss
    // can be divided by the number of targets the whole step counts.
    std::vector<data::Batch> step_batches;
    if (train_data_->masked()) {
      int64_t counted = 0;
      for (int64_t m = 0; m < accum; ++m) {
        step_batches.push_back(train_data_->next());
        counted += step_batches.back().counted;
      }
      // Packed rows (Note [Packed rows]): each micro-batch's positions come with it.
      if (step_batches.front().positions.defined())
        batches.positions = [&](int64_t m) {
          return step_batches[static_cast<size_t>(m)].positions;
        };
      batches.denominator =
          static_cast<double>(std::max<int64_t>(counted_over_replicas(counted), 1));
    }
    batches.next = [&](int64_t m) {
      const data::Batch b =
          step_batches.empty() ? train_data_->next() : step_batches[static_cast<size_t>(m)];
      return std::pair{on(device_, b.inputs), on(device_, b.targets)};
    };
    batches.at = [&](int64_t m, const char* point) {
      const bool forward = std::string_view(point) == "forward";
      if (anomaly_) anomaly_->set_micro_step(m);
      if (m != 0) return;
      fault(step + 1, point);
      if (forward && nan_injector_ && options_.inject_nan(step + 1)) nan_injector_->arm();
    };
    hooks.before_update = [this, step] { fault(step + 1, "optimizer"); };
    const Accelerator::StepResult r = [&] {
      DeviceScope on_device(device_);  // Note [Training device]
      return acc_->train_step(*model_, batches, step, hooks);
    }();
    if (!r.skipped.empty()) {
      ++result.skipped_steps;
      say(r.skipped);
    }
    const double local_loss = r.loss;
    const double gnorm = r.grad_norm;
    const double lr = r.lr;
    const parallel::ParallelStats stats = acc_->last_step_stats();
    exposed_ms.push_back(stats.exposed_comm_ms);
    if (stats.bubble >= 0) bubbles.push_back(stats.bubble);
    double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    step_times.push_back(dt);
    profile.end_step(dt, stats.exposed_comm_ms, stats.bubble);

    bool last = step + 1 == t.max_steps;
    bool log =
        last || step == start_step_ || (t.log_interval > 0 && (step + 1) % t.log_interval == 0);
    if (log) {
      double loss = sum_over_replicas(local_loss);
      if (step == start_step_) result.first_loss = loss;
      result.last_loss = loss;
      StepStats s;
      s.step = step + 1;
      s.max_steps = t.max_steps;
      s.loss = loss;
      s.lr = lr;
      s.grad_norm = gnorm;
      s.step_ms = dt * 1e3;
      s.tokens_per_s = tokens_per_step / dt;
      s.mfu = result.peak_gflops > 0 ? s.tokens_per_s * flops_tok / (result.peak_gflops * 1e9) : 0;
      if (stats.bubble >= 0) s.bubble = all_reduce_sum(stats.bubble) / world_size();
      s.offload_read_bytes = stats.offload_read_bytes;
      s.offload_written_bytes = stats.offload_written_bytes;
      s.offload_busy_ms = stats.offload_busy_ms;
      progress.step(s, last || (t.log_interval > 0 && (step + 1) % (t.log_interval * 10) == 0));
      if (!options_.quiet) log_step(s, dt, result.skipped_steps);
    }
    bool eval = val_data_ && ((t.eval_interval > 0 && (step + 1) % t.eval_interval == 0) || last);
    if (eval) {
      result.last_val_loss = evaluate();
      progress.message("step " + std::to_string(step + 1) + " | val loss " +
                       format_loss(result.last_val_loss));
      if (metrics_)
        metrics_->write(
            MetricsLine("eval").add("step", step + 1).add("val_loss", result.last_val_loss));
    }
    poll_async_save(/*wait=*/false, result);
    if (interval > 0 && ((step + 1) % interval == 0 || last)) save_checkpoint(step + 1, &result);
  }
  poll_async_save(/*wait=*/true, result);
  acc_->synchronize();
  result.steps = t.max_steps - start_step_;
  result.step_ms = step_times.empty() ? 0 : steady_median(step_times) * 1e3;
  result.tokens_per_s = step_times.empty() ? 0 : tokens_per_step / (result.step_ms / 1e3);
  // Note [MFU peak]: a measured start peak is checked against one at the end, in a run long
  // enough for the check to cost little; every rank agrees (a rank's short run counts against).
  const double trained_s = std::chrono::duration<double>(Clock::now() - train_start).count();
  if (options_.measure_peak && peak.source == "measured" &&
      all_reduce_sum(trained_s < kEndCheckRatio * peak.seconds ? 1.0 : 0.0) == 0) {
    const double end_peak = all_reduce_sum(measured_gemm_peak(device_, cfg_.compute_dtype()));
    if (end_peak > 1.25 * result.peak_gflops && result.peak_gflops > 0) {
      char note[200];
      std::snprintf(note, sizeof note,
                    "note: the GEMM peak measured at the end (%.0f GFLOP/s) is %.0f%% above the "
                    "start's (%.0f): the machine was busy at the start, MFU is high by as much",
                    end_peak, 100 * (end_peak / result.peak_gflops - 1), result.peak_gflops);
      if (rank() == 0 && !options_.quiet) say(note);
    }
  }
  result.mfu =
      result.peak_gflops > 0 ? result.tokens_per_s * flops_tok / (result.peak_gflops * 1e9) : 0;
  result.exposed_comm_ms = world_size() > 1 && !exposed_ms.empty() ? steady_median(exposed_ms) : 0;
  if (!bubbles.empty()) result.bubble = all_reduce_sum(steady_median(bubbles)) / world_size();
  result.peak_tracked_bytes = tracker_->total_peak();
  if (!options_.quiet) log_end(result);
  if (profile.enabled() && rank() == 0) {
    std::fputs(step_profile_report(profile, cfg_, model_->config(), world_size()).c_str(), stdout);
  }
  finish(result);
  autograd::release_lm_head_buffers();  // Note [Recycled tensors]: nothing kept past training
  return result;
}

void Trainer::log_step(const StepStats& s, double step_s, int64_t skipped) {
  std::vector<double> ranks;
  for (const std::string& v : comm::all_gather_strings(world_.get(), std::to_string(step_s * 1e3)))
    ranks.push_back(std::stod(v));
  if (!metrics_) return;
  std::string memory = "{";
  for (int c = 0; c < kNumMemCategories; ++c)
    memory += std::string(c ? "," : "") +
              json_quote(mem_category_name(static_cast<MemCategory>(c))) + ":" +
              std::to_string(tracker_->current(static_cast<MemCategory>(c)));
  const parallel::ParallelStats stats = acc_->last_step_stats();
  metrics_->write(MetricsLine("step")
                      .add("step", s.step)
                      .add("loss", s.loss)
                      .add("lr", s.lr)
                      .add("grad_norm", s.grad_norm)
                      .add("tokens_per_s", s.tokens_per_s)
                      .add("mfu", s.mfu)
                      .add("step_ms", s.step_ms)
                      .add("step_ms_ranks", ranks)
                      .add("exposed_comm_ms", stats.exposed_comm_ms)
                      .add("bubble", s.bubble)
                      .add("offload_read_bytes", stats.offload_read_bytes)
                      .add("offload_written_bytes", stats.offload_written_bytes)
                      .add("offload_busy_ms", stats.offload_busy_ms)
                      .add("skipped_steps", skipped)
                      .add_json("memory", memory + "}")
                      .add("memory_peak", tracker_->total_peak()));
}

void Trainer::log_end(const TrainResult& r) {
  if (parallel::PipelineParallelism* pp = acc_->parallelism().pipeline()) {
    const std::vector<std::string> ranks =
        comm::all_gather_strings(world_.get(), pp->timeline().last_step_json());
    std::string all = "[";
    for (size_t i = 0; i < ranks.size(); ++i) all += (i ? "," : "") + ranks[i];
    if (metrics_) metrics_->write(MetricsLine("timeline").add_json("ranks", all + "]"));
  }
  if (!metrics_) return;
  metrics_->write(MetricsLine("end")
                      .add("steps", r.steps)
                      .add("tokens_per_s", r.tokens_per_s)
                      .add("step_ms", r.step_ms)
                      .add("mfu", r.mfu)
                      .add("exposed_comm_ms", r.exposed_comm_ms)
                      .add("bubble", r.bubble)
                      .add("peak_tracked_bytes", r.peak_tracked_bytes)
                      .add("checkpoints_saved", r.checkpoints_saved)
                      .add("skipped_steps", r.skipped_steps));
}

void Trainer::finish(TrainResult& r) {
  if (rank() == 0 && !options_.quiet) {
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    std::printf(
        "%s\n",
        format_summary(r, static_cast<double>(ru.ru_maxrss) / 1024.0, world_size()).c_str());
    std::printf("memory (rank 0):\n%s\n", tracker_->breakdown().c_str());
    if (std::string note = acc_->parallelism().memory_note(); !note.empty())
      std::printf("%s\n", note.c_str());
  }
  if (std::string wrote = acc_->finish_training(); !wrote.empty()) say(wrote);
  // Every rank takes part: the export gathers units and generation may gather parameters.
  write_outputs(
      cfg_, *model_, *acc_, [this](const Tensor& ids) { return last_logits(ids); }, rank() == 0,
      options_.quiet);
  std::fflush(stdout);
}

}  // namespace braid::train
