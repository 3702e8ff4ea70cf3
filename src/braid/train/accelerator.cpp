#include "braid/train/accelerator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "braid/checkpoint/checkpoint_reader.h"
#include "braid/checkpoint/resume.h"
#include "braid/comm/collective_guard.h"
#include "braid/comm/world.h"
#include "braid/config/accelerate_config.h"
#include "braid/config/config_agreement.h"
#include "braid/config/deepspeed_config.h"
#include "braid/config/provenance.h"
#include "braid/core/error.h"
#include "braid/launch/threads.h"
#include "braid/optim/clip_grad.h"
#include "braid/optim/param_groups.h"
#include "braid/parallel/parallelize.h"
#include "braid/train/auto_plan.h"
#include "braid/train/plan_config.h"

namespace braid::train {

config::TrainConfig load_run_config(const RunConfigSources& s, std::string* mapping,
                                    config::Provenance* origins) {
  config::TrainConfig cfg = config::load_config(s.yaml, origins);
  BRAID_CHECK(s.deepspeed.empty() || s.accelerate.empty(), "--deepspeed and an Accelerate config (",
              s.accelerate,
              ") both given; an Accelerate config names its DeepSpeed file itself "
              "(deepspeed_config.deepspeed_config_file)");
  std::string described;
  if (!s.deepspeed.empty() || !s.accelerate.empty()) {
    // DeepSpeed's batch arithmetic counts data-parallel ranks: the launched ones over tp x pp.
    int64_t launched = s.launched_ranks > 0 ? s.launched_ranks : comm::launched_world_size();
    launched = std::max<int64_t>(1, launched);
    std::string ranks_said = launched == 1 ? std::string(
                                                 "1 rank (not launched; under braid launch "
                                                 "-n N the arithmetic uses N)")
                                           : std::to_string(launched) + " launched ranks";
    // Not launched (--print-config at the prompt): an Accelerate file's num_processes, as
    // accelerate launch would start them.
    if (launched == 1 && !s.accelerate.empty()) {
      const auto acc = config::accelerate_launch_settings(s.accelerate);
      if (acc.num_processes > 1) {
        launched = acc.num_processes;
        ranks_said = std::to_string(launched) + " ranks (the file's num_processes; not launched)";
      }
    }
    const int64_t dp = config::data_parallel_size(cfg, launched);
    described = "# batch arithmetic over data-parallel size " + std::to_string(dp) + ": " +
                ranks_said + "\n";
    const auto entries = !s.deepspeed.empty()
                             ? config::load_deepspeed_config(cfg, s.deepspeed, dp)
                             : config::load_accelerate_config(cfg, s.accelerate, dp);
    described += config::describe_dialect(
        !s.deepspeed.empty() ? s.deepspeed + " (DeepSpeed)" : s.accelerate + " (Accelerate)",
        entries);
    if (origins) origins->add(entries);
  }
  for (const auto& o : s.overrides) config::apply_override(cfg, o, origins);
  // Note [Auto plan]: resolved over the launched ranks before anything reads the layout.
  const int world = std::max(1, comm::launched_world_size());
  const std::string chosen =
      resolve_auto_plan(cfg, world, world / std::max(1, launch::local_world_size()));
  if (!chosen.empty()) described += "# " + chosen + "\n";
  if (mapping) *mapping = described;
  return cfg;
}

std::shared_ptr<comm::ProcessGroup> launched_world(const config::TrainConfig& cfg) {
  comm::ProcessGroupOptions po;
  po.timeout =
      std::chrono::milliseconds(static_cast<int64_t>(cfg.parallel.comm_timeout_s * 1000.0));
  po.debug = cfg.parallel.comm_debug;
  return comm::init_world(po);
}

namespace {
// The fp16 loss scaler's state as checkpoint counters (the scale by its bits: min_loss_scale
// need not be a power of two) and back.
void add_scaler_counters(const optim::LossScaler::State& st, std::map<std::string, int64_t>& c) {
  int64_t bits = 0;
  std::memcpy(&bits, &st.cur_scale, sizeof bits);
  c["loss_scale_bits"] = bits;
  c["loss_scale_iter"] = st.cur_iter;
  c["loss_scale_last_overflow_iter"] = st.last_overflow_iter;
  c["loss_scale_hysteresis"] = st.cur_hysteresis;
  c["loss_scale_dynamic"] = st.is_dynamic ? 1 : 0;
}

optim::LossScaler::State scaler_state_from(const checkpoint::Manifest& m) {
  BRAID_CHECK(m.counters.count("loss_scale_bits") != 0,
              "resume: the checkpoint has no fp16 loss scaler state (it was saved by a run with "
              "training.precision other than fp16); resume it with its own precision");
  optim::LossScaler::State st;
  const int64_t bits = m.counter("loss_scale_bits");
  std::memcpy(&st.cur_scale, &bits, sizeof bits);
  st.cur_iter = m.counter("loss_scale_iter");
  st.last_overflow_iter = m.counter("loss_scale_last_overflow_iter");
  st.cur_hysteresis = static_cast<int>(m.counter("loss_scale_hysteresis"));
  st.is_dynamic = m.counter("loss_scale_dynamic") != 0;
  return st;
}

optim::LrSchedule schedule_from(const config::TrainConfig& cfg) {
  optim::LrSchedule s;
  s.decay = optim::lr_decay_from_name(cfg.schedule.type);
  s.lr = cfg.optimizer.lr;
  if (cfg.schedule.scale_lr)
    s.lr *= static_cast<double>(cfg.training.global_batch_size) /
            static_cast<double>(cfg.schedule.base_batch_size);
  s.warmup_steps = cfg.schedule.warmup_steps;
  s.log_warmup = cfg.schedule.warmup_type == "log";
  s.total_steps = cfg.schedule.decay_steps > 0 ? cfg.schedule.decay_steps : cfg.training.max_steps;
  s.min_lr = s.lr * cfg.schedule.min_lr_ratio;
  s.validate();
  return s;
}

}  // namespace

Accelerator::Accelerator(config::TrainConfig config)
    : Accelerator(config, launched_world(config)) {}

Accelerator::Accelerator(config::TrainConfig config, std::shared_ptr<comm::ProcessGroup> world,
                         std::shared_ptr<MemoryTracker> tracker)
    : cfg_(std::move(config)),
      world_(std::move(world)),
      tracker_(tracker ? std::move(tracker)
                       : std::make_shared<MemoryTracker>("cpu (rank " +
                                                         std::to_string(process_index()) + ")")) {
  config::validate_training(cfg_);
  if (world_) config::check_config_agrees(cfg_, *world_);
  if (world_) world_->set_memory_tracker(tracker_);
  tracker_->set_budget(memory_budget_from(cfg_, world_.get()));
  MemoryScope scope(tracker_);
  parallelism_ = parallel::parallelize(parallel_plan_from(cfg_), world_);
  resolve_batch(cfg_, parallelism_->dp_size());
  schedule_ = schedule_from(cfg_);
  if (cfg_.compute_dtype() == DType::f16)
    scaler_ = std::make_unique<optim::LossScaler>(config::loss_scaler_config(cfg_));
}

Accelerator::~Accelerator() = default;

nn::TransformerOptions Accelerator::model_options() {
  nn::TransformerOptions o;
  o.materialize = false;  // declared only: the runtime decides what this rank holds
  o.tensor_parallel = parallelism_->tensor_parallel();
  o.context_parallel = parallelism_->context_parallel();
  return o;
}

void Accelerator::prepare(nn::Model& model, std::function<void(int, Tensor&)> fill,
                          std::function<void(int, int64_t, int64_t, Tensor)> fill_range) {
  BRAID_CHECK(model_ == nullptr, "Accelerator: prepare(model) called twice");
  MemoryScope scope(tracker_);
  parallel::MaterializeOptions mo;
  mo.param_dtype = cfg_.compute_dtype();
  if (fill) {
    mo.fill = std::move(fill);
    mo.fill_range = std::move(fill_range);
  } else {
    const uint64_t seed = cfg_.training.seed;
    mo.fill = [&model, seed](int u, Tensor& unit) {
      model.full_layout().init_unit(model.global_unit(u), unit, seed);
    };
    // A rank that keeps part of a unit, or shares its drawing with its replicas, draws that
    // part alone (Note [Ranged loads]); tensor parallelism's ranges are of its slices, which
    // draw whole parameters anyway.
    if (!parallelism_->tensor_parallel())
      mo.fill_range = [&model, seed](int u, int64_t begin, int64_t end, Tensor part) {
        const int global = model.global_unit(u);
        BRAID_CHECK(model.layout().units()[static_cast<size_t>(u)].numel ==
                        model.full_layout().units()[static_cast<size_t>(global)].numel,
                    "Accelerator: unit ", u, " is not the whole model's unit ", global);
        model.full_layout().init_unit_range(global, begin, end, std::move(part), seed);
      };
  }
  parallelism_->materialize(model, mo);
  model_ = &model;
}

optim::Optimizer& Accelerator::prepare_optimizer() {
  BRAID_CHECK(model_ != nullptr, "Accelerator: prepare(model) before prepare_optimizer()");
  BRAID_CHECK(!optimizer_, "Accelerator: prepare_optimizer() called twice");
  MemoryScope scope(tracker_);
  // Every rank allocates its optimizer state; one past its budget stops them all.
  comm::all_ranks_or_throw(world_.get(), [&] {
    optim::DecaySplitOptions split;
    split.weight_decay = static_cast<float>(cfg_.optimizer.weight_decay);
    auto groups = optim::split_decay_groups(parallelism_->optimizer_slices(), split);
    const auto& o = cfg_.optimizer;
    auto store = parallelism_->optimizer_state_store();  // null: in memory
    if (o.type == "adamw") {
      optimizer_ = std::make_unique<optim::AdamW>(std::move(groups), static_cast<float>(o.beta1),
                                                  static_cast<float>(o.beta2),
                                                  static_cast<float>(o.eps), std::move(store));
    } else {
      optimizer_ = std::make_unique<optim::SGD>(std::move(groups), static_cast<float>(o.momentum),
                                                o.nesterov, std::move(store));
    }
  });
  return *optimizer_;
}

optim::Optimizer& Accelerator::optimizer() {
  BRAID_CHECK(optimizer_ != nullptr, "Accelerator: prepare_optimizer() has not been called");
  return *optimizer_;
}

data::DistributedSampler Accelerator::prepare_sampler(int64_t num_samples,
                                                      data::SamplerOptions options) const {
  return data::DistributedSampler(num_samples, dp_size(), dp_rank(), options);
}

std::unique_ptr<data::DataLoader> Accelerator::prepare_data_loader(
    const std::string& dir, const std::string& split, data::DataLoaderOptions options) const {
  MemoryScope scope(tracker_);
  options.world = dp_size();
  options.rank = dp_rank();
  options.batch_size = cfg_.training.micro_batch_size;
  if (options.seed == 0) options.seed = cfg_.training.seed;
  return data::DataLoader::from_dir(dir, split, options);
}

Accelerator::MicroStep Accelerator::accumulate() {
  BRAID_CHECK(model_ != nullptr, "Accelerator: prepare(model) before accumulate()");
  BRAID_CHECK(!in_micro_step_,
              "Accelerator: accumulate() called twice without a backward() between them");
  const int64_t count = cfg_.training.gradient_accumulation_steps;
  BRAID_CHECK(!parallelism_->is_pipelined(),
              "Accelerator: accumulate()/backward() run a forward written by the caller, but a "
              "pipelined model's forward runs inside the schedule (parallel."
              "pipeline_parallel_size ",
              cfg_.parallel.pipeline_parallel_size, "): use train_step()");
  if (micro_ == 0) {
    parallelism_->zero_grad();
    grad_norm_ = -1;
  }
  parallelism_->begin_micro_step(micro_, count);
  in_micro_step_ = true;
  sync_gradients_ = false;
  return {micro_, count};
}

void Accelerator::backward(const autograd::Variable& loss) {
  MemoryScope scope(tracker_);
  if (!in_micro_step_) {
    // No accumulate() before the forward: a step of one micro-step.
    BRAID_CHECK(micro_ == 0 && cfg_.training.gradient_accumulation_steps == 1,
                "Accelerator: backward() without accumulate() before the forward, with "
                "training.gradient_accumulation_steps ",
                cfg_.training.gradient_accumulation_steps,
                ": call accumulate() before each micro-batch's forward");
    (void)accumulate();
  }
  BRAID_CHECK(loss.value().numel() == 1, "Accelerator: backward() needs a scalar loss, got ",
              loss.value().shape().str());
  // Note [DDP averaging]: the strategies sum gradients over data-parallel ranks (and their cp
  // ranks, whose losses are the means over their equal shares of each sequence).
  const int64_t count = cfg_.training.gradient_accumulation_steps;
  const double scale = loss_scale() / static_cast<double>(count * loss_shares());
  loss.backward(static_cast<float>(scale));
  parallelism_->end_micro_step();
  in_micro_step_ = false;
  micro_ = (micro_ + 1) % count;
  sync_gradients_ = micro_ == 0;
}

double Accelerator::clip_grad_norm(double max_norm) {
  BRAID_CHECK(sync_gradients_,
              "Accelerator: clip_grad_norm() before the last micro-step's backward (check "
              "sync_gradients())");
  MemoryScope scope(tracker_);
  grad_norm_ = parallelism_->clip_grad_norm(max_norm, loss_scale());
  return grad_norm_;
}

bool Accelerator::step() {
  if (!sync_gradients_) return false;
  MemoryScope scope(tracker_);
  StepResult r;
  r.lr = learning_rate();
  // The verdict on the step is the unscaled global norm (Note [Non-finite steps]): computed here
  // when the loop did not clip.
  if (grad_norm_ < 0 && (scaler_ || cfg_.training.on_nonfinite != "off"))
    grad_norm_ = parallelism_->clip_grad_norm(0, loss_scale());
  finish_step(completed_steps() + skipped_steps_, r, {});
  sync_gradients_ = false;
  return r.updated;
}

double Accelerator::learning_rate() const {
  return schedule_.lr_at(completed_steps());
}

checkpoint::SaveResult Accelerator::save_state(const std::filesystem::path& root,
                                               std::map<std::string, int64_t> counters) {
  MemoryScope scope(tracker_);
  parallelism_->synchronize();
  return checkpoint::save_checkpoint(world_.get(), optimizer(),
                                     save_request(root, completed_steps(), std::move(counters)));
}

checkpoint::SaveRequest Accelerator::save_request(const std::filesystem::path& root, int64_t step,
                                                  std::map<std::string, int64_t> counters) {
  checkpoint::SaveRequest req;
  req.root = root;
  req.step = step;
  req.keep_last = cfg_.checkpoint.keep_last;
  req.layout = parallelism_->describe();
  req.dp_size = dp_size();
  req.counters = std::move(counters);
  req.counters["optimizer_steps"] = optimizer().step_count();
  if (scaler_) add_scaler_counters(scaler_->state(), req.counters);
  req.config = config::dump_config(cfg_);
  return req;
}

std::map<std::string, int64_t> Accelerator::load_state(const std::filesystem::path& dir) {
  MemoryScope scope(tracker_);
  parallelism_->synchronize();
  optim::Optimizer& opt = optimizer();
  // Each candidate's load overwrites every slice a failed newer one read (Note [Verified reads]).
  auto reader = checkpoint::open_resume_checkpoint(
      dir.string(), dir, world_.get(), [this](const std::string& s) { print(s); },
      [&](const checkpoint::CheckpointReader& r) {
        comm::all_ranks_or_throw(world_.get(), [&] {
          r.read_optimizer(opt);
          r.read_parameters(opt);
        });
      });
  BRAID_CHECK(reader != nullptr, "Accelerator: no checkpoint in ", dir.string());
  restore_loss_scale(reader->manifest());
  // The masters changed as after an update: the runtime republishes them.
  parallelism_->after_optimizer_step();
  parallelism_->synchronize();
  micro_ = 0;
  in_micro_step_ = sync_gradients_ = false;
  return reader->manifest().counters;
}

void Accelerator::restore_loss_scale(const checkpoint::Manifest& m) {
  if (scaler_) scaler_->set_state(scaler_state_from(m));
}

void Accelerator::print(const std::string& line) const {
  if (!is_main_process()) return;
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

std::vector<float> Accelerator::gather(const std::vector<float>& values) const {
  if (!world_) return values;
  const int64_t n = static_cast<int64_t>(values.size());
  DeviceScope host(Device::cpu());  // host values, whatever the caller's default device
  Tensor in = Tensor::empty(Shape{n}, DType::f32, MemCategory::communication);
  std::copy(values.begin(), values.end(), in.data<float>());
  Tensor out = Tensor::empty(Shape{n * world_->size()}, DType::f32, MemCategory::communication);
  world_->all_gather(out, in)->wait();
  return {out.data<float>(), out.data<float>() + out.numel()};
}

double Accelerator::reduce_mean(double v) const {
  if (!world_) return v;
  const std::vector<float> all = gather({static_cast<float>(v)});
  double sum = 0;
  for (float x : all) sum += x;
  return sum / static_cast<double>(all.size());
}

void Accelerator::wait_for_everyone() const {
  if (world_) world_->barrier()->wait();
}

Tensor Accelerator::gather_parameters(const nn::Model& model) {
  MemoryScope scope(tracker_);
  parallelism_->synchronize();
  const nn::ParamLayout& layout = model.full_layout();
  Tensor out = Tensor::zeros(Shape{layout.total()});
  parallelism_->for_each_full_unit([&](int u, const Tensor& unit) {
    const nn::UnitInfo& info = layout.units()[static_cast<size_t>(u)];
    out.flat_range(info.offset, info.numel).copy_(unit.flat_range(0, info.numel));
  });
  return out;
}

}  // namespace braid::train
