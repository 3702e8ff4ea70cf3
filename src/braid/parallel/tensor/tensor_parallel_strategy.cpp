#include "braid/parallel/tensor/tensor_parallel_strategy.h"

#include "braid/core/error.h"

namespace braid::parallel {

namespace {
// fn(local, full) for each parameter of unit u: this rank's declaration and the whole one.
template <typename Fn>
void for_each_param(const nn::Transformer& model, int u, Fn fn) {
  const nn::ParamLayout& full = model.full_layout();
  const nn::ParamLayout& mine = model.layout();
  const auto& full_params = full.units()[static_cast<size_t>(model.global_unit(u))].params;
  const auto& mine_params = mine.units()[static_cast<size_t>(u)].params;
  for (size_t k = 0; k < mine_params.size(); ++k)
    fn(mine.params()[static_cast<size_t>(mine_params[k])],
       full.params()[static_cast<size_t>(full_params[k])]);
}
}  // namespace

TensorParallelStrategy::TensorParallelStrategy(std::shared_ptr<DeviceMesh> mesh,
                                               std::unique_ptr<Strategy> inner,
                                               bool sequence_parallel)
    : mesh_(std::move(mesh)), inner_(std::move(inner)) {
  tp_ = std::make_unique<TpGroup>(mesh_->group_ptr("tp"), sequence_parallel);
  inner_->set_model_parallel_group(mesh_->group_ptr("tp"));
}

std::string TensorParallelStrategy::describe() const {
  return inner_->describe() + " x " + tp_->describe();
}

void TensorParallelStrategy::materialize(nn::Model& declared, const MaterializeOptions& options) {
  nn::Transformer& model = transformer_for(declared, "tensor parallelism");
  BRAID_CHECK(model.tensor_parallel() == tp_.get(),
              "TensorParallelStrategy: the model must be declared with the strategy's "
              "tensor_parallel() (TransformerOptions::tensor_parallel)");
  model_ = &model;
  MaterializeOptions local = options;
  if (options.fill) {
    // Each unit is filled whole, as one process would, and this rank keeps its slices.
    local.fill = [&model, fill = options.fill](int u, Tensor& unit_params) {
      Tensor whole = Tensor::zeros(
          Shape{model.full_layout().units()[static_cast<size_t>(model.global_unit(u))].numel});
      fill(u, whole);
      for_each_param(model, u, [&](const nn::ParamInfo& p, const nn::ParamInfo& f) {
        const Tensor src = whole.flat_range(f.unit_offset, f.numel).view(f.param->shape);
        Tensor dst = unit_params.flat_range(p.unit_offset, p.numel).view(p.param->shape);
        nn::take_slice(src, dst, p.param->tp);
      });
    };
  }
  inner_->materialize(model, local);
}

void TensorParallelStrategy::zero_grad() {
  tp_->reset_stats();  // the tp traffic counts from the step's first forward
  inner_->zero_grad();
}

StrategyStats TensorParallelStrategy::last_step_stats() const {
  StrategyStats s = inner_->last_step_stats();
  s.exposed_comm_ms += tp_->stats().wait_ms;
  return s;
}

void TensorParallelStrategy::for_each_full_unit(const UnitVisitor& fn) {
  BRAID_CHECK(model_ != nullptr, "TensorParallelStrategy: not materialised");
  for_each_held_unit(fn, all_units(model_->layout()));
}

void TensorParallelStrategy::for_each_held_unit(const UnitVisitor& fn,
                                                const std::vector<int>& units) {
  BRAID_CHECK(model_ != nullptr, "TensorParallelStrategy: not materialised");
  comm::ProcessGroup& g = tp_->group();
  const int tp = g.size();
  // The inner strategy names units by their global index; pair them with this rank's again.
  size_t next = 0;
  inner_->for_each_held_unit(
      [&](int, const Tensor& local) {
        const int u = units.at(next++);
        const int64_t n = model_->layout().units()[static_cast<size_t>(u)].numel;
        Tensor all = Tensor::empty(Shape{tp * n}, DType::f32, MemCategory::communication);
        g.all_gather(all, local.flat_range(0, n).to(DType::f32))->wait();
        const int g = model_->global_unit(u);
        Tensor whole =
            Tensor::zeros(Shape{model_->full_layout().units()[static_cast<size_t>(g)].numel});
        for_each_param(*model_, u, [&](const nn::ParamInfo& p, const nn::ParamInfo& f) {
          Tensor dst = whole.flat_range(f.unit_offset, f.numel).view(f.param->shape);
          const nn::TpSlice& s = p.param->tp;
          const int replicas = tp / s.parts;
          for (int r = 0; r < tp; r += replicas) {  // one rank of each part
            nn::TpSlice theirs = s;
            theirs.part = r / replicas;
            const Tensor src = all.flat_range(r * n + p.unit_offset, p.numel).view(p.param->shape);
            nn::place_slice(src, dst, theirs);
          }
        });
        fn(g, whole);
      },
      units);
}

}  // namespace braid::parallel
