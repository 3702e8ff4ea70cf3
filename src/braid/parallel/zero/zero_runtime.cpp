#include "braid/parallel/zero/zero_runtime.h"

#include <chrono>
#include <string>

#include "braid/autograd/variable.h"
#include "braid/core/device_backend.h"
#include "braid/core/error.h"
#include "braid/kernels/ops.h"
#include "braid/parallel/zero/offload_store.h"

namespace braid::parallel {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
}  // namespace

ZeroRuntime::ZeroRuntime(ZeroOptions options, ZeroGroups groups)
    : opt_(std::move(options)), groups_(std::move(groups)) {}

// Note [Mixed-precision units]: with a compute dtype other than f32 (docs/design.md "Precision") a
// unit's parameters are views of `full` in that dtype and the f32 masters are only what this
// rank's optimizer steps, as DeepSpeed's bf16/fp16 optimizers and FSDP's MixedPrecision keep
// them: stage 1/2 hold their own f32 piece (`master`) and after each step cast it into their
// piece of `full` and all-gather the compute dtype (half the bytes of f32); stage 3 keeps its
// f32 shard and casts it into `gather_src` for each all-gather, so it gathers and holds half the
// bytes too. Export gathers the f32 masters instead (gather_for_read). Gradients stay f32.
void ZeroRuntime::attach(nn::Model& model, nn::ParamLayout layout, DType compute) {
  model_ = &model;
  layout_ = std::move(layout);
  compute_ = compute;
  next_reduce_ = static_cast<int>(units_.size()) - 1;
}

void ZeroRuntime::register_hooks(const std::shared_ptr<ZeroRuntime>& self) {
  std::weak_ptr<ZeroRuntime> weak = self;
  const auto& lu = self->layout_.units();
  for (size_t k = 0; k < lu.size(); ++k) {
    const int u = static_cast<int>(k);
    for (size_t m = 0; m < lu[k].users.size(); ++m) {
      const bool owner = m < lu[k].owners.size();
      nn::Module* module = lu[k].users[m];
      module->register_forward_pre_hook([weak, u, owner](nn::Module&) {
        if (auto s = weak.lock()) s->on_forward_pre(u, owner);
      });
      module->register_forward_post_hook([weak, u](nn::Module&, const autograd::Variable&) {
        if (auto s = weak.lock()) s->on_forward_post(u);
      });
      module->register_backward_pre_hook([weak, u, owner](nn::Module&) {
        if (auto s = weak.lock()) s->on_backward_pre(u, owner);
      });
    }
    for (int p : lu[k].params) {
      nn::Parameter* slot = self->layout_.params()[static_cast<size_t>(p)].param;
      if (!slot->requires_grad) continue;
      slot->var.register_post_accumulate_hook([weak, u](autograd::Variable&) {
        if (auto s = weak.lock()) s->on_grad_ready(u);
      });
    }
  }
}

// ---- the step ----

ParallelStats ZeroRuntime::step_stats() const {
  ParallelStats s = stats_;
  if (offload_) {
    const OffloadFile::Totals step = offload_->totals() - io_mark_;
    s.offload_read_bytes = step.read;
    s.offload_written_bytes = step.written;
    s.offload_busy_ms = step.busy_s * 1e3;
  }
  return s;
}

void ZeroRuntime::begin_micro_step(int64_t micro_step, int64_t accumulation_steps) {
  micro_step_ = micro_step;
  accumulation_steps_ = accumulation_steps;
  reducing_ = opt_.sync_each_batch || micro_step + 1 == accumulation_steps;
  in_backward_ = false;
  written_max_ = 0;
  if (micro_step == 0) {
    stats_ = {};
    if (offload_) io_mark_ = offload_->totals();
    for (ZeroUnit& u : units_) u.reductions = 0;
  }
  // Stage 1 reducing every micro-step: each micro-step's local gradients start from zero (the
  // reduced sum so far is in grad_piece).
  if (opt_.stage == 1 && opt_.sync_each_batch && micro_step > 0)
    for (ZeroUnit& u : units_) u.grads.zero_();
}

void ZeroRuntime::end_micro_step() {
  if (reducing_) {
    // Trainable parameters that received no gradient (Note [Reduce order] needs every unit).
    std::string unused;
    int missing = 0;
    for (ZeroUnit& u : units_) {
      if (u.trainable == 0 || u.ready) continue;
      missing += u.trainable - u.arrived;
      if (unused.size() < 200)
        unused += (unused.empty() ? "'" : ", '") +
                  layout_.units()[static_cast<size_t>(u.index)].name + "' (" +
                  std::to_string(u.trainable - u.arrived) + " of " + std::to_string(u.trainable) +
                  ")";
      if (opt_.find_unused_parameters) {
        ensure_grads(u);
        u.ready = true;
      }
    }
    if (missing > 0 && !opt_.find_unused_parameters) {
      poll_reductions(true);
      for (ZeroUnit& u : units_) reshard(u);
      for (ZeroUnit& u : units_) u.arrived = 0, u.ready = false;
      next_reduce_ = static_cast<int>(units_.size()) - 1;
      in_backward_ = false;
      BRAID_THROW(opt_.label, ": ", missing,
                  " trainable parameter(s) received no gradient in this backward, in unit(s) ",
                  unused,
                  ". Freeze them (model.freeze) or set parallel.find_unused_parameters: true");
    }
    launch_ready_reductions();
  }
  const auto t0 = Clock::now();
  poll_reductions(true);
  finish_grad_write();
  stats_.exposed_comm_ms += ms_since(t0);
  grad_scale_ = 1.0f;
  for (ZeroUnit& u : units_) {
    reshard(u);  // the backward is over: nothing stays gathered
    u.arrived = 0;
    u.ready = false;
  }
  next_reduce_ = static_cast<int>(units_.size()) - 1;
  in_backward_ = false;
}

void ZeroRuntime::reduce_accumulated() {
  BRAID_CHECK(!opt_.sync_each_batch, opt_.label,
              ": reduce_accumulated() needs micro-steps that only accumulate");
  begin_micro_step(accumulation_steps_ - 1, accumulation_steps_);  // the last: reducing
  for (ZeroUnit& u : units_) {
    if (u.trainable == 0) continue;
    ensure_grads(u);
    u.ready = true;
  }
  end_micro_step();
}

// ---- hooks ----

void ZeroRuntime::on_forward_pre(int i, bool owner) {
  ZeroUnit& u = units_[static_cast<size_t>(i)];
  wait_update(u);
  if (!u.sharded) return;
  ensure_gathered(u);
  if (!owner) return;
  if (in_backward_) {  // an activation-checkpointing rerun inside backward
    if (opt_.backward_prefetch) prefetch(i - 1);
  } else if (opt_.forward_prefetch) {
    prefetch(i + 1);
  }
}

void ZeroRuntime::on_forward_post(int i) {
  ZeroUnit& u = units_[static_cast<size_t>(i)];
  if (!u.sharded || in_backward_) return;  // a rerun in backward keeps them for its backward
  if (!autograd::grad_enabled() || (u.reshard_after_forward && !u.keep_gathered)) {
    reshard(u);  // no backward will need them (no gradient recorded), or FULL_SHARD
  } else {
    u.held = true;
  }
}

void ZeroRuntime::on_backward_pre(int i, bool owner) {
  in_backward_ = true;
  poll_reductions(false);
  ZeroUnit& u = units_[static_cast<size_t>(i)];
  if (u.sharded) ensure_gathered(u);
  if (owner && opt_.backward_prefetch) prefetch(i - 1);
  ensure_grads(u);
}

void ZeroRuntime::on_grad_ready(int i) {
  ZeroUnit& u = units_[static_cast<size_t>(i)];
  BRAID_CHECK(u.arrived < u.trainable, opt_.label, ": unit '",
              layout_.units()[static_cast<size_t>(i)].name,
              "' received more gradients than it has trainable parameters in one backward (a "
              "parameter used in two checkpointed functions, or two backwards per micro-step)");
  if (++u.arrived < u.trainable) return;
  u.ready = true;
  // Its backward is done: free the gathered parameters (Note [Kept units] for frozen ones).
  if (u.sharded && !u.has_frozen) reshard(u);
  launch_ready_reductions();
}

// ---- parameters ----

void ZeroRuntime::start_read(ZeroUnit& u) {
  u.shard_stage = io_buffer(u.geo.piece, DType::f32, MemCategory::parameters);
  u.shard_read = offload_->read(u.param_region, u.shard_stage);
  u.params = ZeroUnit::Params::reading;
}

bool ZeroRuntime::deferred_pending(const ZeroUnit& u) const {
  return deferred_ && deferred_->pending(u.index);
}

Tensor ZeroRuntime::run_deferred(ZeroUnit& u) {
  if (!deferred_pending(u)) return Tensor();
  BRAID_CHECK(!u.shard_read, opt_.label, ": unit ", u.index,
              "'s shard was read before its deferred update");
  return deferred_->run(u.index);
}

void ZeroRuntime::run_deferred() {
  if (deferred_) deferred_->run_all();
}

// Note [Deferred step] (offload_store.h): a unit whose page is pending is updated first, and
// its shard is the updated masters.
Tensor ZeroRuntime::read_shard(ZeroUnit& u) {
  if (Tensor updated = run_deferred(u); updated.defined())
    return updated.flat_range(0, u.geo.piece);
  if (!u.shard_read) start_read(u);
  const auto t0 = Clock::now();
  u.shard_read->wait();
  stats_.exposed_comm_ms += ms_since(t0);
  u.shard_read = nullptr;
  return u.shard_stage.flat_range(0, u.geo.piece);
}

void ZeroRuntime::start_gather(ZeroUnit& u) {
  wait_update(u);  // the replicas' after-step exchange writes the shard being sent
  const int64_t piece = u.geo.piece, block = piece * groups_.s;
  // offloaded: one replica, so the shard is one piece, read into a host buffer (Note [Offload on
  // a device]: copied to the device the unit is gathered on), or its compute copy in memory
  // (Note [Offloaded compute copy])
  Tensor source = u.compute_shard.defined() ? u.compute_shard
                  : u.param_region >= 0     ? read_shard(u)
                                            : u.shard;
  if (const Device device = current_device(); source.device() != device) source = source.to(device);
  if (source.dtype() != compute_) {  // Note [Mixed-precision units]
    u.gather_src = Tensor::empty(Shape{source.numel()}, compute_, MemCategory::communication);
    kernels::cast(u.gather_src, source);
    source = u.gather_src;
  }
  u.full = recycled_.take(Shape{u.geo.padded}, compute_, MemCategory::parameters);
  for (int r = 0; r < groups_.r; ++r)
    u.gathers.push_back(groups_.gather->all_gather(u.full.flat_range(r * block, block),
                                                   source.flat_range(r * piece, piece)));
  u.params = ZeroUnit::Params::gathering;
  stats_.bytes_gathered += u.geo.padded * static_cast<int64_t>(dtype_size(compute_));
}

void ZeroRuntime::finish_gather(ZeroUnit& u) {
  const auto t0 = Clock::now();
  for (auto& w : u.gathers) w->wait();
  stats_.exposed_comm_ms += ms_since(t0);
  u.gathers.clear();
  u.shard_stage = Tensor();
  u.gather_src = Tensor();
  for (int p : layout_.units()[static_cast<size_t>(u.index)].params) {
    const nn::ParamInfo& info = layout_.params()[static_cast<size_t>(p)];
    info.param->var.value() =
        u.full.flat_range(info.unit_offset, info.numel).view(info.param->shape);
  }
  u.params = ZeroUnit::Params::gathered;
}

void ZeroRuntime::ensure_gathered(ZeroUnit& u) {
  if (u.params == ZeroUnit::Params::gathered) return;
  if (u.params != ZeroUnit::Params::gathering) start_gather(u);  // from resident or reading
  finish_gather(u);
}

int ZeroRuntime::gathered_in_flight() const {
  int n = 0;
  for (const ZeroUnit& u : units_)
    n += u.sharded && u.params != ZeroUnit::Params::resident && !u.held;
  return n;
}

void ZeroRuntime::prefetch(int i) {
  if (i < 0 || i >= static_cast<int>(units_.size())) return;
  ZeroUnit& u = units_[static_cast<size_t>(i)];
  if (!u.sharded || u.params != ZeroUnit::Params::resident) return;
  if (gathered_in_flight() >= opt_.limit_all_gathers) return;
  // An offloaded shard is read ahead; its all-gather waits for the unit's turn (it must be
  // issued in the same order on every rank, and I/O may finish in any order).
  if (u.param_region >= 0 && !u.compute_shard.defined()) {
    // A pending page is read ahead by the step's store; its shard is what its update writes.
    if (!deferred_pending(u)) start_read(u);
  } else
    start_gather(u);
}

Tensor ZeroRuntime::master_piece(ZeroUnit& u) const {
  if (!u.sharded)
    return u.master.defined() ? u.master : u.full.flat_range(u.geo.piece_begin(c()), u.geo.piece);
  if (u.param_region >= 0) return Tensor();
  return u.shard.flat_range(groups_.replica * u.geo.piece, u.geo.piece);
}

bool ZeroRuntime::optimizer_writes_compute(const ZeroUnit& u) const {
  return !u.sharded && u.master.defined() && !opt_.offload_optimizer_host;
}

Tensor ZeroRuntime::gather_for_read(ZeroUnit& u) {
  wait_update(u);
  if (compute_ == DType::f32) {
    if (u.sharded) ensure_gathered(u);
    return u.full;
  }
  // The f32 masters (Note [Mixed-precision units]): this rank's piece of each replica's block.
  Tensor full = Tensor::empty(Shape{u.geo.padded}, DType::f32, MemCategory::parameters);
  if (!u.sharded) {
    groups_.grad->all_gather(full, u.master)->wait();
    return full;
  }
  reshard(u);  // nothing of u is in flight
  const Tensor source = u.param_region >= 0 ? read_shard(u) : u.shard;
  const int64_t piece = u.geo.piece, block = piece * groups_.s;
  for (int r = 0; r < groups_.r; ++r)
    groups_.gather
        ->all_gather(full.flat_range(r * block, block), source.flat_range(r * piece, piece))
        ->wait();
  u.shard_stage = Tensor();
  return full;
}

void ZeroRuntime::reshard(ZeroUnit& u) {
  if (!u.sharded || u.params == ZeroUnit::Params::resident) return;
  for (auto& w : u.gathers) w->wait();
  u.gathers.clear();
  if (u.shard_read) u.shard_read->wait();
  u.shard_read = nullptr;
  u.shard_stage = Tensor();
  u.gather_src = Tensor();
  for (int p : layout_.units()[static_cast<size_t>(u.index)].params)
    layout_.params()[static_cast<size_t>(p)].param->var.value() = Tensor();
  recycled_.give(std::move(u.full));
  u.params = ZeroUnit::Params::resident;
  u.held = false;
}

void ZeroRuntime::launch_update(ZeroUnit& u) {
  if (u.trainable == 0) return;  // frozen everywhere: nothing changed
  const int64_t piece = u.geo.piece;
  if (!u.sharded) {
    Tensor mine = u.full.flat_range(u.geo.piece_begin(c()), piece);
    // Note [Mixed-precision units]; the optimizer may have written it already
    if (u.master.defined() && !optimizer_writes_compute(u)) kernels::cast(mine, u.master);
    u.update = groups_.grad->all_gather(u.full, mine);
  } else if (groups_.replicate) {
    u.update =
        groups_.replicate->all_gather(u.shard, u.shard.flat_range(groups_.replica * piece, piece));
  }
}

void ZeroRuntime::set_slices_per_unit(std::vector<int> slices_per_unit) {
  slices_per_unit_ = std::move(slices_per_unit);
  slices_per_unit_.resize(units_.size(), 0);
  updated_.assign(units_.size(), false);
  for (size_t k = 0; k < units_.size(); ++k) updated_[k] = slices_per_unit_[k] == 0;
  next_update_ = 0;
}

void ZeroRuntime::advance_updates() {
  while (next_update_ < static_cast<int>(units_.size()) &&
         updated_[static_cast<size_t>(next_update_)]) {
    launch_update(units_[static_cast<size_t>(next_update_)]);
    ++next_update_;
  }
}

void ZeroRuntime::unit_updated(int u) {
  if (updated_.empty()) set_slices_per_unit({});
  updated_[static_cast<size_t>(u)] = true;
  advance_updates();
}

void ZeroRuntime::launch_updates() {
  if (updated_.empty()) set_slices_per_unit({});
  std::fill(updated_.begin(), updated_.end(), true);
  advance_updates();
  // The next step starts over: units without slices on this rank are done from the start.
  for (size_t k = 0; k < units_.size(); ++k) updated_[k] = slices_per_unit_[k] == 0;
  next_update_ = 0;
}

void ZeroRuntime::wait_update(ZeroUnit& u) {
  if (!u.update) return;
  const auto t0 = Clock::now();
  u.update->wait();
  stats_.exposed_comm_ms += ms_since(t0);
  u.update = nullptr;
}

void ZeroRuntime::wait_all_updates() {
  for (ZeroUnit& u : units_) wait_update(u);
}

// ---- gradients ----

void ZeroRuntime::bind_grads(ZeroUnit& u, const Tensor& grads) {
  for (int p : layout_.units()[static_cast<size_t>(u.index)].params) {
    const nn::ParamInfo& info = layout_.params()[static_cast<size_t>(p)];
    if (!info.param->requires_grad) continue;
    info.param->var.set_grad(
        grads.defined() ? grads.flat_range(info.unit_offset, info.numel).view(info.param->shape)
                        : Tensor());
  }
}

void ZeroRuntime::ensure_grads(ZeroUnit& u) {
  if (opt_.stage == 1 || u.trainable == 0 || u.grads.defined()) return;
  // Note [Gradients in flight]: at most one earlier unit's reduction may still hold its buffer
  // when a new one is allocated, so a backward holds (besides units kept on purpose) two units'
  // gradients, however far communication falls behind compute.
  if (pending_.size() > 1) {
    const auto t0 = Clock::now();
    while (pending_.size() > 1) {
      pending_.front().work->wait();
      poll_reductions(false);
    }
    stats_.exposed_comm_ms += ms_since(t0);
  }
  u.grads = recycled_.take(Shape{u.geo.padded}, DType::f32, MemCategory::gradients);
  u.grads.zero_();
  bind_grads(u, u.grads);
}

}  // namespace braid::parallel
