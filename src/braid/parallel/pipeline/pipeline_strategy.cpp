#include "braid/parallel/pipeline/pipeline_strategy.h"

#include <bit>
#include <cmath>
#include <filesystem>

#include "braid/comm/collective_guard.h"
#include "braid/comm/gather_strings.h"
#include "braid/core/error.h"
#include "braid/parallel/pipeline/stage_balance.h"
#include "braid/parallel/pipeline/stage_runner.h"

namespace braid::parallel {

using pipeline::BlockRange;

PipelineStrategy::PipelineStrategy(std::shared_ptr<DeviceMesh> mesh,
                                   std::unique_ptr<Strategy> inner, Strategy& dp,
                                   PipelineOptions options)
    : mesh_(std::move(mesh)), inner_(std::move(inner)), options_(std::move(options)) {
  pipeline::ScheduleShape shape{options_.schedule, stages(), stages(), options_.chunks};
  pipeline::check_schedule(shape);
  // Every rank creates the same groups in the same order.
  dp.set_model_parallel_group(mesh_->group_along({"pp", "tp"}, "mp"));
  const int last = stages() - 1;
  embedding_group_ = mesh_->group("pp").split(stage() == 0 || stage() == last ? 0 : -1, stage(),
                                              mesh_->group("pp").name() + "/embedding");
  timeline_ = std::make_unique<pipeline::Timeline>(mesh_->world().rank());
}

PipelineStrategy::~PipelineStrategy() = default;

std::string PipelineStrategy::describe() const {
  std::string s = inner_->describe() + " x pp=" + std::to_string(stages()) + " (" +
                  pipeline::schedule_name(options_.schedule);
  if (options_.chunks > 1) s += ", " + std::to_string(options_.chunks) + " chunks per rank";
  if (!partition_.empty())
    s += ", " + options_.balance + " stages " + pipeline::describe_partition(partition_);
  return s + ")";
}

std::optional<nn::PipelineStage> PipelineStrategy::pipeline_stage(const nn::ModelConfig& config) {
  partition_ = pipeline::plan_stages(config, options_, stages(), mesh_->world());
  pipeline::ScheduleShape shape{options_.schedule, stages(), stages(), options_.chunks};
  runner_ = std::make_unique<pipeline::StageRunner>(mesh_->group_ptr("pp"), shape, partition_,
                                                    timeline_.get());
  nn::PipelineStage mine;
  for (int c = 0; c < options_.chunks; ++c) {
    const BlockRange& r = partition_[static_cast<size_t>(c * stages() + stage())];
    mine.chunks.emplace_back(r.begin, r.end);
  }
  mine.first = stage() == 0;
  mine.last = stage() == stages() - 1;
  return mine;
}

void PipelineStrategy::materialize(nn::Model& declared, const MaterializeOptions& options) {
  nn::Transformer& model = transformer_for(declared, "pipeline parallelism");
  BRAID_CHECK(runner_ && model.pipeline_stage(),
              "PipelineStrategy: declare the model with the strategy's pipeline_stage() "
              "(TransformerOptions::pipeline)");
  model_ = &model;
  inner_->materialize(model, options);
}

void PipelineStrategy::zero_grad() {
  inner_->zero_grad();
}

void PipelineStrategy::begin_micro_step(int64_t, int64_t) {
  BRAID_THROW("PipelineStrategy: micro-steps run inside the schedule; call forward_backward()");
}

void PipelineStrategy::end_micro_step() {
  BRAID_THROW("PipelineStrategy: micro-steps run inside the schedule; call forward_backward()");
}

StepLoss PipelineStrategy::forward_backward(nn::Transformer& model, const MicroBatches& batches) {
  BRAID_CHECK(&model == model_, "PipelineStrategy: forward_backward() on another model");
  timeline_->begin_step(++steps_);
  StepLoss local = runner_->run(
      model, batches, [this](int64_t k, int64_t n) { inner_->begin_micro_step(k, n + 1); },
      [this] { inner_->end_micro_step(); });
  // Note [Pipeline reduction]: the schedule has drained; each gradient is reduced once.
  inner_->reduce_accumulated();
  sync_tied_embeddings();
  timeline_->end_step();
  bool finite = local.finite;
  const double sum = broadcast_from_last(local.sum, &finite);
  return {sum, finite};
}

// Megatron's embedding group: the first stage's token table and the last stage's replica (which
// its LM head reads) get the sum of both gradients, so both take the same optimizer step.
void PipelineStrategy::sync_tied_embeddings() {
  if (!model_->config().tie_word_embeddings || !embedding_group_ || stages() == 1) return;
  const std::string& name = model_->full_layout().params().front().name;  // the token table
  for (optim::ParamSlice& s : inner_->optimizer_slices())
    if (s.name() == name && s.grad.defined() && s.grad.numel() > 0)
      embedding_group_->all_reduce(s.grad)->wait();
}

// The last stage's loss, to every stage (as bits: no rounding on the way).
double PipelineStrategy::broadcast_from_last(double v, bool* finite) {
  Tensor t = Tensor::empty(Shape{2}, DType::i64, MemCategory::communication);
  t.data<int64_t>()[0] = std::bit_cast<int64_t>(v);
  t.data<int64_t>()[1] = *finite ? 1 : 0;
  mesh_->group("pp").broadcast(t, stages() - 1)->wait();
  *finite = t.data<int64_t>()[1] != 0;
  return std::bit_cast<double>(t.data<int64_t>()[0]);
}

double PipelineStrategy::eval_loss(nn::Transformer& model, const Tensor& ids,
                                   const Tensor& targets) {
  double sum = 0;
  runner_->forward_only(model, ids, [&](const autograd::Variable& h) {
    sum = model.head_loss(h, targets, 1.0).value().item();
  });
  bool finite = std::isfinite(sum);
  return broadcast_from_last(sum, &finite);
}

Tensor PipelineStrategy::last_logits(nn::Transformer& model, const Tensor& ids) {
  Tensor logits =
      Tensor::empty(Shape{1, model.config().vocab_size}, DType::f32, MemCategory::activations);
  runner_->forward_only(
      model, ids, [&](const autograd::Variable& h) { logits.copy_(model.head_last_logits(h)); });
  mesh_->group("pp").broadcast(logits, stages() - 1)->wait();
  return logits;
}

// Every unit of the whole model in order: virtual stage by virtual stage, each unit broadcast
// over pp from the stage that holds it (its dp and tp peers gather it there first).
void PipelineStrategy::for_each_full_unit(const UnitVisitor& fn) {
  BRAID_CHECK(model_ != nullptr, "PipelineStrategy: not materialised");
  comm::ProcessGroup& pp = mesh_->group("pp");
  const nn::ParamLayout& full = model_->full_layout();
  const int V = static_cast<int>(partition_.size());
  auto relay = [&](int root, const std::vector<int>& globals, const std::vector<int>& mine) {
    if (stage() == root) {
      inner_->for_each_held_unit(
          [&](int g, const Tensor& unit) {
            const int64_t n = full.units()[static_cast<size_t>(g)].numel;
            Tensor t = unit.flat_range(0, n).to(DType::f32);
            pp.broadcast(t, root)->wait();
            fn(g, t);
          },
          mine);
      return;
    }
    for (int g : globals) {
      Tensor t = Tensor::empty(Shape{full.units()[static_cast<size_t>(g)].numel}, DType::f32,
                               MemCategory::communication);
      pp.broadcast(t, root)->wait();
      fn(g, t);
    }
  };
  // This rank's local index of global unit g (-1: not held).
  auto local = [&](int g) {
    for (size_t u = 0; u < model_->layout().units().size(); ++u)
      if (model_->global_unit(static_cast<int>(u)) == g) return static_cast<int>(u);
    return -1;
  };
  const int units = static_cast<int>(full.units().size());
  for (int vs = 0; vs < V; ++vs) {
    const BlockRange& r = partition_[static_cast<size_t>(vs)];
    std::vector<int> globals;
    if (vs == 0) globals.push_back(0);  // the embeddings
    for (int b = r.begin; b < r.end; ++b) globals.push_back(1 + b);
    if (vs == V - 1) globals.push_back(units - 1);  // the head
    const int root = vs % stages();
    std::vector<int> mine;
    if (stage() == root)
      for (int g : globals) mine.push_back(local(g));
    relay(root, globals, mine);
  }
}

StrategyStats PipelineStrategy::last_step_stats() const {
  StrategyStats s = inner_->last_step_stats();
  s.exposed_comm_ms += runner_ ? runner_->last_wait_ms() : 0;
  if (steps_ > 0) s.bubble = timeline_->last_bubble();
  return s;
}

std::string PipelineStrategy::finish_training() {
  if (options_.trace.empty()) return "";
  write_trace(options_.trace);
  return "pipeline timeline of " + std::to_string(steps_) + " step(s) written to " +
         options_.trace + " (open it in https://ui.perfetto.dev or chrome://tracing)";
}

void PipelineStrategy::write_trace(const std::string& path) {
  const std::vector<std::string> all =
      comm::all_gather_strings(&mesh_->world(), timeline_->chrome_events_json());
  // Only rank 0 writes, but a failure (no such directory, a full disk) stops every rank.
  comm::all_ranks_or_throw(&mesh_->world(), [&] {
    if (mesh_->world().rank() != 0) return;
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    pipeline::write_chrome_trace(path, all);
  });
}

}  // namespace braid::parallel
