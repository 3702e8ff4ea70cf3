#include "braid/parallel/ddp/replicated_data_parallel.h"

#include <algorithm>

#include "braid/comm/chunking.h"
#include "braid/comm/collective_guard.h"
#include "braid/comm/read_and_share.h"
#include "braid/core/error.h"
#include "braid/core/fault_ahead.h"
#include "braid/kernels/ops.h"
#include "braid/optim/clip_grad.h"
#include "braid/parallel/model_parallel_norm.h"

namespace braid::parallel {

std::vector<optim::ParamSlice> whole_parameter_slices(nn::Model& model) {
  std::vector<optim::ParamSlice> slices;
  nn::FlatBuffer& flat = model.flat();
  for (const auto& e : flat.entries()) {
    const Tensor grad = e.param->requires_grad ? e.param->var.grad() : Tensor();
    const Tensor master =
        flat.params().flat_range(e.range.offset, e.range.size).view(e.param->shape);
    optim::ParamSlice s = optim::ParamSlice::whole(e.name, master, grad);
    if (!flat.compute().shares_storage(flat.params()))  // Note [Compute copy in the step]
      s.compute = flat.compute().flat_range(e.range.offset, e.range.size).view(e.param->shape);
    s.shard.global_shape = e.param->full_shape;  // this rank's tp slice of it (Note [Placements])
    s.shard.tp = e.param->tp;
    slices.push_back(std::move(s));
  }
  return slices;
}

ReplicatedDataParallel::ReplicatedDataParallel(std::shared_ptr<comm::ProcessGroup> group,
                                               ReplicatedOptions options)
    : group_(std::move(group)), options_(options) {}

ReplicatedDataParallel::~ReplicatedDataParallel() = default;

std::string ReplicatedDataParallel::describe() const {
  if (!group_) return "none (one process)";
  return "ddp over " + options_.group_name + "=" + std::to_string(group_->size()) + ", " +
         std::to_string(ddp_ ? ddp_->buckets().size() : 0) + " gradient buckets";
}

nn::Model& ReplicatedDataParallel::model() const {
  BRAID_CHECK(model_ != nullptr, "ReplicatedDataParallel: materialize() has not been called");
  return *model_;
}

void ReplicatedDataParallel::materialize(nn::Model& model, const MaterializeOptions& options) {
  BRAID_CHECK(model_ == nullptr, "ReplicatedDataParallel: materialize() called twice");
  // Note [Ranged loads] (step.h): each parameter is filled by the replica that owns it (Note
  // [Owners by size]: the one that saved it, for a checkpoint of this layout), and sent to the
  // others as soon as it is (Note [Shared as read], comm/read_and_share.h).
  const bool ranged = group_ && options.fill_range;
  all_ranks_or_throw(group_.get(), [&] {
    model.materialize(/*allocate_grads=*/true, nn::ParamLayout::kAlign, options.param_dtype);
    if (ranged) return;
    const nn::FlatBuffer& flat = model.flat();
    for (size_t u = 0; u < flat.layout().units().size(); ++u) {
      const nn::FlatRange r = flat.unit_range(static_cast<int>(u));
      Tensor unit = flat.params().flat_range(r.offset, r.size);
      options.fill(static_cast<int>(u), unit);
    }
  });
  if (ranged) {
    const nn::FlatBuffer& flat = model.flat();
    const nn::ParamLayout& layout = flat.layout();
    std::vector<std::string> names;
    std::vector<int64_t> sizes;
    for (const nn::ParamInfo& p : layout.params()) {
      names.push_back(p.name);
      sizes.push_back(p.numel);
    }
    const std::vector<int> owner = comm::owners_by_size(names, sizes, group_->size());
    const FaultAhead ahead({flat.params()});  // Note [Faulting in ahead]
    comm::ReadAndShare load(group_.get());
    for (size_t u = 0; u < layout.units().size(); ++u) {
      const nn::FlatRange r = flat.unit_range(static_cast<int>(u));
      Tensor unit = flat.params().flat_range(r.offset, r.size);
      for (int i : layout.units()[u].params) {
        const nn::ParamInfo& p = layout.params()[static_cast<size_t>(i)];
        const int o = owner[static_cast<size_t>(i)];
        Tensor part = unit.flat_range(p.unit_offset, p.numel);
        load.step(
            [&] {
              if (o == group_->rank())
                options.fill_range(static_cast<int>(u), p.unit_offset, p.unit_offset + p.numel,
                                   part);
            },
            [&](comm::ProcessGroup& g) { return g.broadcast(part, o); });
      }
    }
    load.finish();
  }
  model_ = &model;
  if (!group_) {
    model.flat().sync_compute();
    return;
  }
  std::vector<DdpParam> params;
  for (const auto& e : model.flat().entries()) params.push_back({e.param->var, e.range.offset});
  DdpOptions o;
  o.bucket_mb = options_.bucket_mb;
  o.find_unused_parameters = options_.find_unused_parameters;
  o.reduce_dtype = options_.reduce_dtype;
  o.broadcast_parameters = !ranged;  // gathered: the same bits on every replica already
  ddp_ = std::make_unique<DistributedDataParallel>(std::move(params), model.flat().params(),
                                                   model.flat().grads(), group_, o);
  model.flat().sync_compute();  // after the broadcast of rank 0's masters
}

void ReplicatedDataParallel::after_optimizer_step() {
  // Nothing to republish: the optimizer refreshed the compute copy of every master it wrote (its
  // slices name them, Note [Compute copy in the step] in optim/optimizer.h).
}

std::vector<optim::ParamSlice> ReplicatedDataParallel::optimizer_slices() {
  return whole_parameter_slices(model());
}

void ReplicatedDataParallel::zero_grad() {
  model().zero_grad();
  stats_ = {};
}

void ReplicatedDataParallel::begin_micro_step(int64_t micro_step, int64_t accumulation_steps) {
  micro_step_ = micro_step;
  accumulation_steps_ = accumulation_steps;
  const bool last = micro_step + 1 == accumulation_steps;
  if (ddp_) ddp_->set_sync(last || options_.sync_each_batch);
  // sync_each_batch: each micro-step's gradients are reduced on their own (Note [Accumulation
  // order]); the sum so far waits in reduced_sum_.
  if (options_.sync_each_batch && micro_step > 0) model().zero_grad();
}

void ReplicatedDataParallel::end_micro_step() {
  if (!ddp_ || !ddp_->sync()) return;
  ddp_->finish_backward();
  stats_.exposed_comm_ms += ddp_->last_step_stats().exposed_wait_ms;
  stats_.bytes_reduced += ddp_->last_step_stats().bytes;
  if (!options_.sync_each_batch || accumulation_steps_ == 1) return;
  Tensor& grads = model().flat().grads();
  if (micro_step_ == 0) {
    if (!reduced_sum_.defined())
      reduced_sum_ = Tensor::empty(grads.shape(), DType::f32, MemCategory::gradients);
    reduced_sum_.copy_(grads);
  } else {
    kernels::axpy(reduced_sum_, grads, 1.0f);
  }
  if (micro_step_ + 1 == accumulation_steps_) grads.copy_(reduced_sum_);
}

void ReplicatedDataParallel::reduce_accumulated() {
  BRAID_CHECK(!options_.sync_each_batch,
              "ReplicatedDataParallel: reduce_accumulated() needs micro-steps "
              "that only accumulate (sync_each_batch off)");
  if (!ddp_) return;
  ddp_->reduce_accumulated();
  stats_.exposed_comm_ms += ddp_->last_step_stats().exposed_wait_ms;
  stats_.bytes_reduced += ddp_->last_step_stats().bytes;
}

// Note [Norm split over replicas]: after the all-reduce every rank of the group holds the same
// whole gradient, so each takes the norm's two passes (max |g|, then the exact integer sum of
// squares) over its own 1/W of the flat buffer and the group combines them: the max and an
// integer sum are the same in any split (Note [Global norm]), so the norm is the same bits as
// one rank's pass over everything, for half the passes' time on 2 ranks (gpt2-medium bf16 under
// DDP: 205 ms of a 7.2 s step). Ranks holding different slices of the model (Note
// [Model-parallel norm]) count what counts on them within their 1/W, then combine over `mp` too.
// Clipping still scales every gradient on every rank.
double ReplicatedDataParallel::clip_grad_norm(double max_norm, double loss_scale,
                                              comm::ProcessGroup* mp) {
  nn::FlatBuffer& flat = model().flat();
  const Tensor& grads = flat.grads();
  if (!mp && !group_) return optim::clip_grad_norm({grads}, max_norm, {}, false, loss_scale);
  const comm::Chunk mine = group_ ? comm::chunk_of(grads.numel(), group_->size(), group_->rank())
                                  : comm::Chunk{0, grads.numel()};
  std::vector<Tensor> counted;
  if (!mp) {
    counted.push_back(grads.flat_range(mine.offset, mine.size));
  } else {
    for (size_t u = 0; u < flat.layout().units().size(); ++u) {
      const nn::FlatRange r = flat.unit_range(static_cast<int>(u));
      const int64_t lo = std::max(r.offset, mine.offset);
      const int64_t hi = std::min(r.offset + r.size, mine.offset + mine.size);
      if (lo >= hi) continue;
      for (Tensor& t : counted_pieces(flat.layout(), static_cast<int>(u), lo - r.offset,
                                      grads.flat_range(lo, hi - lo)))
        counted.push_back(t);
    }
  }
  const optim::NormReduction reduce = compose(norm_reduction(group_.get(), &stats_.exposed_comm_ms),
                                              norm_reduction(mp, &stats_.exposed_comm_ms));
  return optim::clip_grad_norm({grads}, counted, max_norm, reduce, loss_scale);
}

void ReplicatedDataParallel::for_each_held_unit(const UnitVisitor& fn,
                                                const std::vector<int>& units) {
  nn::FlatBuffer& flat = model().flat();
  for (int u : units) {
    const nn::FlatRange r = flat.unit_range(u);
    fn(model().global_unit(u), flat.params().flat_range(r.offset, r.size));
  }
}

}  // namespace braid::parallel
