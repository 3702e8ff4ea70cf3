#include "braid/parallel/tensor/tensor_parallelism.h"

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

TensorParallelism::TensorParallelism(std::shared_ptr<comm::ProcessGroup> tp, bool sequence_parallel)
    : group_(std::move(tp), sequence_parallel) {}

TensorParallelism::Fill TensorParallelism::slicing(const nn::Transformer& model, Fill fill) const {
  BRAID_CHECK(model.tensor_parallel() == &group_,
              "tensor parallelism: the model must be declared with its model_split() "
              "(TransformerOptions::tensor_parallel)");
  return [&model, fill = std::move(fill)](int u, Tensor& unit_params) {
    // Note [Slices on the host]: the whole unit is filled, and this rank's slices taken, on the
    // host; a unit on a device gets them in one copy (and whole_unit gathers to the host).
    DeviceScope host(Device::cpu());
    Tensor whole = Tensor::zeros(
        Shape{model.full_layout().units()[static_cast<size_t>(model.global_unit(u))].numel});
    fill(u, whole);
    Tensor mine = unit_params.device().is_cpu() ? unit_params : unit_params.to(Device::cpu());
    for_each_param(model, u, [&](const nn::ParamInfo& p, const nn::ParamInfo& f) {
      const Tensor src = whole.flat_range(f.unit_offset, f.numel).view(f.param->shape);
      Tensor dst = mine.flat_range(p.unit_offset, p.numel).view(p.param->shape);
      nn::take_slice(src, dst, p.param->tp);
    });
    if (!unit_params.device().is_cpu()) unit_params.copy_(mine);
  };
}

Tensor TensorParallelism::whole_unit(const nn::Transformer& model, int u, const Tensor& local) {
  comm::ProcessGroup& g = group_.group();
  const int tp = g.size();
  const int64_t n = model.layout().units()[static_cast<size_t>(u)].numel;
  Tensor mine = local.flat_range(0, n).to(DType::f32);
  DeviceScope host(Device::cpu());  // Note [Slices on the host]
  if (!mine.device().is_cpu()) mine = mine.to(Device::cpu());
  Tensor all = Tensor::empty(Shape{tp * n}, DType::f32, MemCategory::communication);
  g.all_gather(all, mine)->wait();
  const int global = model.global_unit(u);
  Tensor whole =
      Tensor::zeros(Shape{model.full_layout().units()[static_cast<size_t>(global)].numel});
  for_each_param(model, u, [&](const nn::ParamInfo& p, const nn::ParamInfo& f) {
    Tensor dst = whole.flat_range(f.unit_offset, f.numel).view(f.param->shape);
    const TpSlice& s = p.param->tp;
    const int replicas = tp / s.parts;
    for (int r = 0; r < tp; r += replicas) {  // one rank of each part
      TpSlice theirs = s;
      theirs.part = r / replicas;
      const Tensor src = all.flat_range(r * n + p.unit_offset, p.numel).view(p.param->shape);
      nn::place_slice(src, dst, theirs);
    }
  });
  return whole;
}

}  // namespace braid::parallel
