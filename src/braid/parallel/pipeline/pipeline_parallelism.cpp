#include "braid/parallel/pipeline/pipeline_parallelism.h"

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

PipelineParallelism::PipelineParallelism(std::shared_ptr<DeviceMesh> mesh, PipelineOptions options)
    : mesh_(std::move(mesh)), options_(std::move(options)) {
  pipeline::check_schedule(shape());
  // The embedding group: the stages of the first and the last virtual stage, when they differ
  // (under zb_v the first stage holds both ends, and its one token table serves both).
  const int first = first_stage(), last = last_stage();
  const int color = first != last && (stage() == first || stage() == last) ? 0 : -1;
  embedding_group_ =
      mesh_->group("pp").split(color, stage(), mesh_->group("pp").name() + "/embedding");
  timeline_ = std::make_unique<pipeline::Timeline>(mesh_->world().rank());
}

PipelineParallelism::~PipelineParallelism() = default;

std::string PipelineParallelism::describe() const {
  std::string s =
      " x pp=" + std::to_string(stages()) + " (" + pipeline::schedule_name(options_.schedule);
  if (options_.chunks > 1) s += ", " + std::to_string(options_.chunks) + " chunks per rank";
  if (!partition_.empty())
    s += ", " + options_.balance + " stages " + pipeline::describe_partition(partition_);
  return s + ")";
}

void PipelineParallelism::split(nn::StagedModel& model) {
  partition_ = pipeline::plan_stages(model, options_, stages(), mesh_->world());
  runner_ = std::make_unique<pipeline::StageRunner>(mesh_->group_ptr("pp"), shape(), partition_,
                                                    timeline_.get());
  nn::PipelineStage mine;
  for (int c = 0; c < options_.chunks; ++c) {
    const int vs = pipeline::virtual_stage(shape(), stage(), c);
    const BlockRange& r = partition_[static_cast<size_t>(vs)];
    mine.chunks.emplace_back(r.begin, r.end);
  }
  mine.first = stage() == first_stage();
  mine.last = stage() == last_stage();
  model.keep_stage(mine);
}

void PipelineParallelism::set_compute_dtype(DType dtype) {
  BRAID_CHECK(runner_, "pipeline parallelism: declare() before materialising");
  runner_->set_compute_dtype(dtype);
}

StepLoss PipelineParallelism::run_schedule(nn::StagedModel& model, const MicroBatches& batches,
                                           const BackwardHooks& hooks) {
  BRAID_CHECK(runner_ && model.pipeline_stage(),
              "pipeline parallelism: the model was not split (Parallelism::materialize)");
  timeline_->begin_step(++steps_);
  return runner_->run(model, batches, hooks.begin, hooks.end);
}

// Megatron's embedding group: the first stage's token table and the last stage's replica (which
// its LM head reads) get the sum of both gradients, so both take the same optimizer step (no
// group when one stage holds both ends).
StepLoss PipelineParallelism::finish_step(const nn::StagedModel& model, DataParallel& data,
                                          StepLoss local) {
  if (embedding_group_)
    for (const std::string& name : model.tied_parameters())
      data.sum_gradient(name, *embedding_group_);
  timeline_->end_step();
  // The last stage's loss, to every stage (as bits: no rounding on the way).
  Tensor t = pipeline::host_i64(2);  // the loss's bits
  t.data<int64_t>()[0] = std::bit_cast<int64_t>(local.sum);
  t.data<int64_t>()[1] = local.finite ? 1 : 0;
  mesh_->group("pp").broadcast(t, last_stage())->wait();
  return {std::bit_cast<double>(t.data<int64_t>()[0]), t.data<int64_t>()[1] != 0};
}

double PipelineParallelism::eval_loss(nn::StagedModel& model, const Tensor& ids,
                                      const Tensor& targets) {
  double sum = 0;
  runner_->forward_only(model, ids, [&](const autograd::Variable& h) {
    sum = model.head_loss(h, targets, 1.0).value().item();
  });
  Tensor t = pipeline::host_i64(1);  // the loss's bits
  t.data<int64_t>()[0] = std::bit_cast<int64_t>(sum);
  mesh_->group("pp").broadcast(t, last_stage())->wait();
  return std::bit_cast<double>(t.data<int64_t>()[0]);
}

Tensor PipelineParallelism::last_logits(nn::Transformer& model, const Tensor& ids) {
  Tensor logits =
      Tensor::empty(Shape{1, model.config().vocab_size}, DType::f32, MemCategory::activations);
  runner_->forward_only(
      model, ids, [&](const autograd::Variable& h) { logits.copy_(model.head_last_logits(h)); });
  mesh_->group("pp").broadcast(logits, last_stage())->wait();
  return logits;
}

// Every unit of the whole model in order: virtual stage by virtual stage, each unit broadcast
// over pp from the stage that holds it (its dp and tp peers gather it there first).
void PipelineParallelism::whole_units(const nn::StagedModel& model, const HeldUnits& held,
                                      const UnitVisitor& fn) {
  comm::ProcessGroup& pp = mesh_->group("pp");
  const nn::ParamLayout& full = model.full_layout();
  const int V = static_cast<int>(partition_.size());
  auto relay = [&](int root, const std::vector<int>& globals, const std::vector<int>& mine) {
    if (stage() == root) {
      held(
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
    for (size_t u = 0; u < model.layout().units().size(); ++u)
      if (model.global_unit(static_cast<int>(u)) == g) return static_cast<int>(u);
    return -1;
  };
  const int units = static_cast<int>(full.units().size());
  for (int vs = 0; vs < V; ++vs) {
    const BlockRange& r = partition_[static_cast<size_t>(vs)];
    std::vector<int> globals;
    if (vs == 0) globals.push_back(0);  // the embeddings
    for (int b = r.begin; b < r.end; ++b) globals.push_back(1 + b);
    if (vs == V - 1) globals.push_back(units - 1);  // the head
    const int root = pipeline::stage_of(shape(), vs);
    std::vector<int> mine;
    if (stage() == root)
      for (int g : globals) mine.push_back(local(g));
    relay(root, globals, mine);
  }
}

double PipelineParallelism::last_wait_ms() const {
  return runner_ ? runner_->last_wait_ms() : 0;
}

double PipelineParallelism::last_bubble() const {
  return steps_ > 0 ? timeline_->last_bubble() : -1;
}

std::string PipelineParallelism::finish_training() {
  if (options_.trace.empty()) return "";
  write_trace(options_.trace);
  return "pipeline timeline of " + std::to_string(steps_) + " step(s) written to " +
         options_.trace + " (open it in https://ui.perfetto.dev or chrome://tracing)";
}

void PipelineParallelism::write_trace(const std::string& path) {
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
