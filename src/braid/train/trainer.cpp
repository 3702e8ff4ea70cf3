#include "braid/train/trainer.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "braid/autograd/variable.h"
#include "braid/comm/world.h"
#include "braid/core/error.h"
#include "braid/kernels/ops.h"
#include "braid/optim/clip_grad.h"
#include "braid/optim/lr_schedule.h"
#include "braid/optim/param_groups.h"
#include "braid/train/config_agreement.h"
#include "braid/train/progress.h"
#include "braid/train/threads.h"
#include "braid/train/trainer_output.h"

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

nn::ModelConfig model_config_from(const TrainConfig& cfg) {
  nn::ModelConfig mc;
  if (!cfg.model.init_from.empty()) {
    mc = nn::ModelConfig::from_hf_file(fs::path(cfg.model.init_from) / "config.json");
  } else if (!cfg.model.config.empty()) {
    mc = nn::ModelConfig::from_hf_file(cfg.model.config);
  } else {
    mc = nn::ModelConfig::preset(cfg.model.preset);
  }
  mc.activation_checkpointing = cfg.model.activation_checkpointing;
  BRAID_CHECK(cfg.data.seq_len <= mc.max_seq_len, "data.seq_len ", cfg.data.seq_len,
              " exceeds the model's maximum sequence length ", mc.max_seq_len);
  return mc;
}

Trainer::Trainer(TrainConfig config, std::shared_ptr<comm::ProcessGroup> world,
                 TrainerOptions options)
    : cfg_(std::move(config)),
      world_(std::move(world)),
      options_(options),
      tracker_(std::make_shared<MemoryTracker>("cpu (rank " +
                                               std::to_string(world_ ? world_->rank() : 0) + ")")) {
  validate(cfg_);
  if (world_) check_config_agrees(cfg_, *world_);
  if (cfg_.parallel.strategy == "none")
    BRAID_CHECK(world_size() == 1, "parallel.strategy is 'none' but ", world_size(),
                " ranks were launched; set parallel.strategy: ddp (or launch one rank)");
  resolve_batch(cfg_, world_size());
  MemoryScope scope(tracker_);
  build_model();
  build_optimizer();
  build_data();
}

Trainer::~Trainer() = default;

void Trainer::build_model() {
  nn::ModelConfig mc = model_config_from(cfg_);
  nn::TransformerOptions to;
  to.seed = cfg_.training.seed;
  to.init_weights = cfg_.model.init_from.empty();
  model_ = std::make_unique<nn::Transformer>(mc, to);
  if (!cfg_.model.init_from.empty()) load_initial_weights(*model_, cfg_.model.init_from);
  if (cfg_.parallel.strategy == "ddp") {
    std::vector<parallel::DdpParam> params;
    for (const auto& e : model_->flat().entries()) params.push_back({e.param->var, e.range.offset});
    parallel::DdpOptions o;
    o.bucket_mb = cfg_.parallel.bucket_mb;
    o.find_unused_parameters = cfg_.parallel.find_unused_parameters;
    ddp_ = std::make_unique<parallel::DistributedDataParallel>(
        std::move(params), model_->flat().params(), model_->flat().grads(), world_, o);
  }
}

void Trainer::build_optimizer() {
  std::vector<optim::ParamSlice> slices;
  for (const auto& e : model_->flat().entries()) {
    optim::ParamSlice s;
    s.name = e.name;
    s.param = e.param->var.value();
    if (e.param->requires_grad) s.grad = e.param->var.grad();
    s.shape = e.param->shape;
    slices.push_back(std::move(s));
  }
  optim::DecaySplitOptions split;
  split.weight_decay = static_cast<float>(cfg_.optimizer.weight_decay);
  auto groups = optim::split_decay_groups(slices, split);
  const auto& o = cfg_.optimizer;
  if (o.type == "adamw") {
    optimizer_ =
        std::make_unique<optim::AdamW>(std::move(groups), static_cast<float>(o.beta1),
                                       static_cast<float>(o.beta2), static_cast<float>(o.eps));
  } else {
    optimizer_ =
        std::make_unique<optim::SGD>(std::move(groups), static_cast<float>(o.momentum), o.nesterov);
  }
}

void Trainer::build_data() {
  const auto& t = cfg_.training;
  const int64_t vocab = model_->config().vocab_size;
  if (cfg_.data.random_tokens) {
    int64_t v = cfg_.data.vocab_size > 0 ? cfg_.data.vocab_size : vocab;
    BRAID_CHECK(v <= vocab, "data.vocab_size ", v, " exceeds the model's vocab_size ", vocab);
    train_data_ = std::make_unique<RandomTokenSource>(t.micro_batch_size, cfg_.data.seq_len, v,
                                                      t.seed, rank(), world_size());
    return;
  }
  data::DataLoaderOptions lo;
  lo.batch_size = t.micro_batch_size;
  lo.seq_len = cfg_.data.seq_len;
  lo.world = world_size();
  lo.rank = rank();
  lo.seed = t.seed;
  lo.shuffle = true;
  lo.drop_last = true;
  lo.vocab_size = vocab;
  // The loader checks the sample count against world size and micro-batch, with the numbers.
  train_data_ = std::make_unique<ShardSource>(cfg_.data.train, "train", lo);
  if (t.eval_batches > 0) {
    lo.shuffle = false;
    lo.drop_last = false;
    val_data_ = std::make_unique<ShardSource>(cfg_.data.train, "val", lo);
  }
}

double Trainer::all_reduce_sum(double v) {
  if (world_size() == 1) return v;
  Tensor t = Tensor::empty(Shape{1}, DType::f32, MemCategory::communication);
  t.data<float>()[0] = static_cast<float>(v);
  world_->all_reduce(t)->wait();
  return t.data<float>()[0];
}

double Trainer::evaluate() {
  if (!val_data_) return NAN;
  MemoryScope scope(tracker_);
  autograd::NoGradGuard no_grad;
  double sum = 0, count = 0;
  for (int64_t i = 0; i < cfg_.training.eval_batches; ++i) {
    data::Batch b = val_data_->next();
    sum += model_->loss(b.inputs, b.targets, 1.0).value().item();
    count += static_cast<double>(b.targets.numel());
  }
  sum = all_reduce_sum(sum);
  count = all_reduce_sum(count);
  return sum / count;
}

TrainResult Trainer::run() {
  MemoryScope scope(tracker_);
  apply_threads_per_rank();
  const auto& t = cfg_.training;
  const int64_t T = cfg_.data.seq_len;
  const int64_t accum = t.gradient_accumulation_steps;
  const double tokens_per_step = static_cast<double>(t.global_batch_size * T);
  const bool printer = rank() == 0 && !options_.quiet;
  Progress progress(printer, comm::launched_world_size() > 0);
  TrainResult result;

  optim::LrSchedule sched;
  sched.decay = optim::lr_decay_from_name(cfg_.schedule.type);
  sched.lr = cfg_.optimizer.lr;
  if (cfg_.schedule.scale_lr)
    sched.lr *= static_cast<double>(t.global_batch_size) /
                static_cast<double>(cfg_.schedule.base_batch_size);
  sched.warmup_steps = cfg_.schedule.warmup_steps;
  sched.total_steps = t.max_steps;
  sched.min_lr = sched.lr * cfg_.schedule.min_lr_ratio;
  sched.validate();

  const auto& mc = model_->config();
  int64_t matmul_params = mc.num_parameters() - (mc.is_gpt2() ? mc.max_seq_len * mc.d_model : 0);
  if (!mc.tie_word_embeddings) matmul_params -= mc.vocab_size * mc.d_model;  // lookup table
  const double flops_tok = flops_per_token(matmul_params, mc.n_layer, T, mc.d_model);
  if (options_.measure_peak)
    result.peak_gflops = all_reduce_sum(kernels::measure_gemm_peak_gflops(2048));

  progress.header(describe_run(cfg_, *model_, world_size(), result.peak_gflops, flops_tok));
  if (val_data_ && t.eval_interval > 0) {
    result.first_val_loss = evaluate();
    progress.message("step 0 | val loss " + format_loss(result.first_val_loss));
  }

  std::vector<double> step_times, exposed_ms;
  for (int64_t step = 0; step < t.max_steps; ++step) {
    auto t0 = Clock::now();
    model_->zero_grad();
    double local_loss = 0;
    for (int64_t m = 0; m < accum; ++m) {
      data::Batch b = train_data_->next();
      if (ddp_) ddp_->set_sync(m + 1 == accum);  // no_sync on all but the last micro-step
      autograd::Variable loss = model_->loss(b.inputs, b.targets, tokens_per_step);
      local_loss += loss.value().item();
      loss.backward();
    }
    if (ddp_) {
      ddp_->finish_backward();
      exposed_ms.push_back(ddp_->last_step_stats().exposed_wait_ms);
    }
    double gnorm = -1;
    if (cfg_.optimizer.grad_clip > 0) {
      // DDP gradients are identical on every rank after the all-reduce: the local norm is the
      // global one (Note [Global norm]).
      gnorm = optim::clip_grad_norm({model_->flat().grads()}, cfg_.optimizer.grad_clip);
      BRAID_CHECK(optim::is_finite_norm(gnorm), "step ", step + 1,
                  ": the gradient norm is not finite (", gnorm,
                  "); training diverged: lower optimizer.lr or raise schedule.warmup_steps");
    }
    double lr = sched.lr_at(step);
    optimizer_->step(static_cast<float>(lr));
    double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    step_times.push_back(dt);

    bool last = step + 1 == t.max_steps;
    bool log = last || step == 0 || (t.log_interval > 0 && (step + 1) % t.log_interval == 0);
    if (log) {
      double loss = all_reduce_sum(local_loss);
      if (step == 0) result.first_loss = loss;
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
      progress.step(s, last || (t.log_interval > 0 && (step + 1) % (t.log_interval * 10) == 0));
    }
    bool eval = val_data_ && ((t.eval_interval > 0 && (step + 1) % t.eval_interval == 0) || last);
    if (eval) {
      result.last_val_loss = evaluate();
      progress.message("step " + std::to_string(step + 1) + " | val loss " +
                       format_loss(result.last_val_loss));
    }
  }
  result.steps = t.max_steps;
  result.step_ms = steady_median(step_times) * 1e3;
  result.tokens_per_s = tokens_per_step / (result.step_ms / 1e3);
  // Note [Peak twice]: a peak measured while the machine is busy elsewhere is too low and
  // inflates MFU (seen: 148%), so the summary uses the better of a start and an end measurement.
  if (options_.measure_peak)
    result.peak_gflops =
        std::max(result.peak_gflops, all_reduce_sum(kernels::measure_gemm_peak_gflops(2048)));
  result.mfu =
      result.peak_gflops > 0 ? result.tokens_per_s * flops_tok / (result.peak_gflops * 1e9) : 0;
  result.exposed_comm_ms = exposed_ms.empty() ? 0 : steady_median(exposed_ms);
  result.peak_tracked_bytes = tracker_->total_peak();
  finish(result);
  return result;
}

void Trainer::finish(TrainResult& r) {
  if (rank() != 0) return;
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  if (!options_.quiet) {
    std::printf(
        "%s\n",
        format_summary(r, static_cast<double>(ru.ru_maxrss) / 1024.0, world_size()).c_str());
    std::printf("memory (rank 0):\n%s\n", tracker_->breakdown().c_str());
  }
  write_outputs(cfg_, *model_, options_.quiet);
  std::fflush(stdout);
}

}  // namespace braid::train
