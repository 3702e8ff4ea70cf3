#include "braid/parallel/parallelism.h"

#include <cmath>

#include "braid/autograd/variable.h"
#include "braid/core/error.h"

namespace braid::parallel {

nn::Transformer& transformer_for(nn::Model& model, const char* what) {
  auto* t = dynamic_cast<nn::Transformer*>(&model);
  BRAID_CHECK(t != nullptr, what,
              " splits a Transformer's blocks and heads; this model is not one (use data "
              "parallelism: ddp, zero1-3 or fsdp)");
  return *t;
}

Parallelism::Parallelism(std::shared_ptr<DeviceMesh> mesh, std::unique_ptr<DataParallel> data,
                         std::unique_ptr<TensorParallelism> tensor,
                         std::unique_ptr<PipelineParallelism> pipeline,
                         std::unique_ptr<CpGroup> context)
    : mesh_(std::move(mesh)),
      data_(std::move(data)),
      tensor_(std::move(tensor)),
      pipeline_(std::move(pipeline)),
      context_(std::move(context)) {
  if (mesh_->size("mp") > 1) model_parallel_ = &mesh_->group("mp");
}

Parallelism::~Parallelism() = default;

std::string Parallelism::describe() const {
  std::string s = data_->describe();
  if (context_) s += " x " + context_->describe();
  if (tensor_) s += " x " + tensor_->describe();
  if (pipeline_) s += pipeline_->describe();
  return s;
}

nn::Transformer& Parallelism::transformer(const char* what) const {
  BRAID_CHECK(model_ != nullptr, "Parallelism: materialize() has not been called");
  return transformer_for(*model_, what);
}

nn::StagedModel& Parallelism::staged(const char* what) const {
  BRAID_CHECK(model_ != nullptr, "Parallelism: materialize() has not been called");
  auto* m = dynamic_cast<nn::StagedModel*>(model_);
  BRAID_CHECK(m != nullptr, what,
              " splits a model declared as a sequence of units (nn::StagedModel: a first part, "
              "layers, a last part); this model is not one");
  return *m;
}

void Parallelism::materialize(nn::Model& model, const MaterializeOptions& options) {
  BRAID_CHECK(model_ == nullptr, "Parallelism: materialize() called twice");
  model_ = &model;
  if (pipeline_) {
    nn::StagedModel& m = staged("pipeline parallelism");
    BRAID_CHECK(!m.pipeline_stage(),
                "pipeline parallelism splits a model declared whole; this one was declared "
                "with a stage (TransformerOptions::pipeline)");
    pipeline_->split(m);  // Note [Pipeline stage]
    pipeline_->set_compute_dtype(options.param_dtype);
  }
  MaterializeOptions local = options;
  if (context_)
    BRAID_CHECK(transformer("context parallelism").context_parallel() == context_.get(),
                "context parallelism: declare the Transformer with the runtime's split "
                "(TransformerOptions::context_parallel = context_parallel())");
  if (tensor_ && local.fill_range)
    local.fill = [range = local.fill_range](int u, Tensor& unit) {
      range(u, 0, unit.numel(), unit);  // this rank's slices already
    };
  else if (tensor_ && local.fill)
    local.fill = tensor_->slicing(transformer("tensor parallelism"), std::move(local.fill));
  data_->materialize(model, local);
}

void Parallelism::zero_grad() {
  if (tensor_) tensor_->reset_stats();  // the tp traffic counts from the step's first forward
  if (context_) context_->reset_stats();
  data_->zero_grad();
}

StepLoss Parallelism::forward_backward(nn::StagedModel& model, const MicroBatches& batches) {
  if (pipeline_) {
    // Note [Pipeline reduction]: the schedule calls the data-parallel hooks around each of its
    // backwards (accumulating only); once it has drained, each gradient is reduced once.
    const BackwardHooks hooks{[this](int64_t k, int64_t n) { data_->begin_micro_step(k, n + 1); },
                              [this] { data_->end_micro_step(); }};
    const StepLoss local = pipeline_->run_schedule(model, batches, hooks);
    data_->reduce_accumulated();
    return pipeline_->finish_step(model, *data_, local);
  }
  StepLoss out;
  for (int64_t m = 0; m < batches.count; ++m) {
    auto [ids, targets] = batches.next(m);
    const nn::PackedRowsScope packed(model, batches.positions ? batches.positions(m) : Tensor());
    data_->begin_micro_step(m, batches.count);
    if (batches.at) batches.at(m, "forward");
    autograd::Variable loss = model.loss(ids, targets, batches.denominator);
    const double l = loss.value().item();
    out.sum += l;
    out.finite = out.finite && std::isfinite(l);
    if (batches.at) batches.at(m, "backward");
    loss.backward(batches.loss_scale);
    data_->end_micro_step();
  }
  return out;
}

void Parallelism::begin_micro_step(int64_t micro_step, int64_t accumulation_steps) {
  BRAID_CHECK(!pipeline_,
              "a pipelined model's micro-steps run inside its schedule: train it with "
              "forward_backward() (Accelerator::forward_backward)");
  data_->begin_micro_step(micro_step, accumulation_steps);
}

void Parallelism::end_micro_step() {
  data_->end_micro_step();
}

double Parallelism::eval_loss(nn::StagedModel& model, const Tensor& ids, const Tensor& targets,
                              const Tensor& positions) {
  const nn::PackedRowsScope packed(model, positions);
  if (pipeline_) return pipeline_->eval_loss(model, ids, targets);
  autograd::NoGradGuard no_grad;
  return model.loss(ids, targets, 1.0).value().item();
}

Tensor Parallelism::last_logits(nn::Transformer& model, const Tensor& ids) {
  const nn::ContextParallel::Suspend whole(context_.get());  // the last position is on one rank
  if (pipeline_) return pipeline_->last_logits(model, ids);
  return model.last_logits(ids);
}

double Parallelism::clip_grad_norm(double max_norm, double loss_scale) {
  return data_->clip_grad_norm(max_norm, loss_scale, model_parallel_);
}

void Parallelism::for_each_held_unit(const UnitVisitor& fn, const std::vector<int>& units) {
  if (!tensor_) {
    data_->for_each_held_unit(fn, units);
    return;
  }
  const nn::Transformer& model = transformer("tensor parallelism");
  // Data parallelism names units by their global index; pair them with this rank's again.
  size_t next = 0;
  data_->for_each_held_unit(
      [&](int g, const Tensor& local) {
        const int u = units.at(next++);
        const Tensor whole = tensor_->whole_unit(model, u, local);
        fn(g, whole);
      },
      units);
}

void Parallelism::for_each_full_unit(const UnitVisitor& fn) {
  BRAID_CHECK(model_ != nullptr, "Parallelism: materialize() has not been called");
  if (!pipeline_) {
    for_each_held_unit(fn, all_units(model_->layout()));
    return;
  }
  pipeline_->whole_units(
      staged("pipeline parallelism"),
      [this](const UnitVisitor& held, const std::vector<int>& units) {
        for_each_held_unit(held, units);
      },
      fn);
}

ParallelStats Parallelism::last_step_stats() const {
  ParallelStats s = data_->last_step_stats();
  if (tensor_) s.exposed_comm_ms += tensor_->wait_ms();
  if (context_) s.exposed_comm_ms += context_->stats().wait_ms;
  if (pipeline_) {
    s.exposed_comm_ms += pipeline_->last_wait_ms();
    s.bubble = pipeline_->last_bubble();
  }
  return s;
}

std::string Parallelism::finish_training() {
  return pipeline_ ? pipeline_->finish_training() : "";
}

}  // namespace braid::parallel
