#include "braid/parallel/zero/sharded_data_parallel.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "braid/core/device_backend.h"
#include "braid/core/error.h"
#include "braid/core/memory_tracker.h"
#include "braid/kernels/ops.h"
#include "braid/optim/clip_grad.h"
#include "braid/parallel/model_parallel_norm.h"
#include "braid/parallel/zero/offload_store.h"
#include "braid/parallel/zero/unit_ordered_store.h"
#include "braid/parallel/zero/zero_runtime.h"

namespace braid::parallel {

ShardedDataParallel::ShardedDataParallel(ZeroGroups groups, ZeroOptions options) {
  BRAID_CHECK(options.stage >= 1 && options.stage <= 3, "ZeRO stage must be 1, 2 or 3, got ",
              options.stage);
  BRAID_CHECK(options.stage == 3 || groups.r == 1, "parallel.sharding_factor ", groups.s,
              " applies to sharded parameters (zero3 / fsdp); ", options.label, " shards over all ",
              groups.n, " ranks");
  BRAID_CHECK(options.limit_all_gathers >= 1, "parallel.limit_all_gathers must be >= 1, got ",
              options.limit_all_gathers);
  BRAID_CHECK(!options.offload_params || options.stage == 3,
              "parallel.offload_params needs "
              "sharded parameters (zero3 or fsdp); ",
              options.label, " keeps them whole in memory");
  BRAID_CHECK(!options.offload_params || options.offload_optimizer,
              "parallel.offload_params needs parallel.offload_optimizer too (the optimizer updates "
              "the offloaded shards in place)");
  BRAID_CHECK(
      !(options.offload_optimizer || options.offload_params) || !options.offload_dir.empty(),
      "offload needs a directory (parallel.offload_dir)");
  BRAID_CHECK(!options.offload_params || groups.r == 1,
              "parallel.offload_params with hybrid "
              "sharding (",
              groups.r, " replicas of shard groups of ", groups.s,
              ") is not supported yet; offload the optimizer alone or shard over all ranks");
  rt_ = std::make_shared<ZeroRuntime>(std::move(options), std::move(groups));
}

ShardedDataParallel::~ShardedDataParallel() {
  // Never leave a collective writing into memory that is about to go.
  try {
    if (rt_ && materialized_) rt_->wait_all_updates();
  } catch (...) {
  }
  if (rt_ && rt_->offload()) {
    const std::filesystem::path dir = rt_->offload()->path().parent_path();
    rt_->set_offload(nullptr);  // the file goes with it (the store may still hold it)
    std::error_code ec;
    std::filesystem::remove(dir, ec);  // only when empty: the other ranks' files may be there
  }
}

std::string ShardedDataParallel::describe() const {
  const ZeroOptions& o = rt_->options();
  const ZeroGroups& g = rt_->groups();
  std::string s = o.label + " over " + o.group_name + "=" + std::to_string(g.n);
  if (g.r > 1) {
    s += " (" + std::to_string(g.r) + " replicas x shard groups of " + std::to_string(g.s);
    // HYBRID_SHARD means to keep the shard groups' traffic inside a host.
    const std::string where = g.shard->placement();
    s += where.empty() ? ", each on one host)" : ", a shard group spans " + where + ")";
  }
  s += o.sync_each_batch ? ", gradients reduced every micro-step"
                         : ", gradients accumulated locally (no_sync)";
  return s;
}

int ShardedDataParallel::dp_rank() const {
  return rt_->groups().grad->rank();
}
int ShardedDataParallel::dp_size() const {
  return rt_->groups().n;
}

void ShardedDataParallel::for_each_piece(
    const std::function<void(ZeroUnit&, optim::ParamSlice, int64_t at)>& fn) {
  BRAID_CHECK(materialized_, "ShardedDataParallel: materialize() has not been called");
  ZeroRuntime& rt = *rt_;
  const nn::ParamLayout& layout = rt.layout();
  const int c = rt.groups().grad->rank();
  for (ZeroUnit& u : rt.units()) {
    const int64_t lo = u.geo.piece_begin(c), hi = lo + u.geo.piece;
    const Tensor master = rt.master_piece(u);  // undefined when the shard is offloaded
    for (int p : layout.units()[static_cast<size_t>(u.index)].params) {
      const nn::ParamInfo& info = layout.params()[static_cast<size_t>(p)];
      const int64_t a = std::max(lo, info.unit_offset);
      const int64_t b = std::min(hi, info.unit_offset + info.numel);
      if (a >= b) continue;
      optim::ParamSlice s;
      s.shard = info.whole();
      s.shard.offset = a - info.unit_offset;
      s.shard.numel = b - a;
      if (master.defined()) s.param = master.flat_range(a - lo, b - a);
      if (rt.optimizer_writes_compute(u)) s.compute = u.full.flat_range(a, b - a);
      if (info.param->requires_grad) {
        if (u.grad_region >= 0)
          s.grad_in_store = true;
        else
          s.grad = u.grad_piece.flat_range(a - lo, b - a);
      }
      fn(u, std::move(s), a - lo);
    }
  }
}

std::vector<optim::ParamSlice> ShardedDataParallel::optimizer_slices() {
  std::vector<optim::ParamSlice> slices;
  for_each_piece([&](ZeroUnit&, optim::ParamSlice s, int64_t) { slices.push_back(std::move(s)); });
  return slices;
}

std::unique_ptr<optim::StateStore> ShardedDataParallel::optimizer_state_store() {
  ZeroRuntime& rt = *rt_;
  std::vector<int> unit_of, per_unit(rt.units().size(), 0);
  std::vector<std::pair<std::string, int64_t>> keys;
  for_each_piece([&](ZeroUnit& u, optim::ParamSlice s, int64_t) {
    unit_of.push_back(u.index);
    keys.emplace_back(s.shard.name, s.shard.offset);
    if (s.trainable()) ++per_unit[static_cast<size_t>(u.index)];
  });
  rt.set_slices_per_unit(per_unit);
  std::weak_ptr<ZeroRuntime> weak = rt_;
  auto unit_done = [weak](int u) {
    if (auto r = weak.lock()) r->unit_updated(u);
  };
  if (!rt.offload()) {  // Note [Update overlap]
    const bool on_host = rt.options().offload_optimizer_host;
    BRAID_CHECK(!on_host || !current_device().is_cpu(),
                "parallel.offload_optimizer is 'cpu', but the model trains on the cpu device, "
                "where the optimizer state already lives in host memory; 'nvme' moves it to files "
                "in parallel.offload_dir");
    return std::make_unique<UnitOrderedStore>(std::move(unit_of), std::move(keys), unit_done,
                                              on_host);
  }
  std::vector<OffloadPage> pages;
  for (ZeroUnit& u : rt.units()) {
    OffloadPage page;
    page.piece = u.geo.piece;
    page.param_region = u.param_region;
    page.grad_region = u.grad_region;
    page.master = rt.master_piece(u);
    page.compute_copy = u.compute_shard;
    pages.push_back(page);
  }
  std::vector<SlicePlace> places;
  for_each_piece([&](ZeroUnit& u, optim::ParamSlice s, int64_t at) {
    places.push_back({s.shard.name, s.shard.offset, u.index, at});
  });
  auto link = [weak](DeferredPages* deferred) {  // Note [Deferred step]
    if (auto r = weak.lock()) r->set_deferred(deferred);
  };
  return std::make_unique<OffloadedStateStore>(rt.offload(), std::move(pages), std::move(places),
                                               rt.grad_scale(), unit_done, link);
}

std::string ShardedDataParallel::memory_note() const {
  const auto& file = rt_->offload();
  if (!file) return "";
  return "offloaded (" + file->path().string() + (file->is_direct() ? ", direct I/O" : "") +
         "): " + format_bytes(file->file_bytes()) + " in the file; read " +
         format_bytes(file->bytes_read()) + ", written " + format_bytes(file->bytes_written()) +
         " so far";
}

void ShardedDataParallel::zero_grad() {
  // Stage 1 keeps a full gradient buffer; stages 2 and 3 start every unit's buffer from zero.
  for (ZeroUnit& u : rt_->units())
    if (rt_->options().stage == 1) u.grads.zero_();
}

void ShardedDataParallel::begin_micro_step(int64_t micro_step, int64_t accumulation_steps) {
  rt_->begin_micro_step(micro_step, accumulation_steps);
}

void ShardedDataParallel::end_micro_step() {
  rt_->end_micro_step();
}

void ShardedDataParallel::reduce_accumulated() {
  rt_->reduce_accumulated();
}

double ShardedDataParallel::clip_grad_norm(double max_norm, double loss_scale,
                                           comm::ProcessGroup* mp) {
  ZeroRuntime& rt = *rt_;
  std::vector<Tensor> pieces, counted;
  for (ZeroUnit& u : rt.units()) {
    if (u.trainable == 0) continue;
    pieces.push_back(u.grad_piece);
    if (!mp) continue;
    for (Tensor& t : counted_pieces(rt.layout(), u.index,
                                    u.geo.piece_begin(rt.groups().grad->rank()), u.grad_piece))
      counted.push_back(t);
  }
  comm::ProcessGroup& group = *rt.groups().grad;
  double& waited = rt.stats().exposed_comm_ms;
  // Note [Global norm]: the pieces of all N ranks are disjoint; combine them exactly (then over
  // the model-parallel group, Note [Model-parallel norm]).
  const optim::NormReduction reduce =
      compose(norm_reduction(&group, &waited), norm_reduction(mp, &waited));
  if (!rt.units().empty() && rt.offload() && rt.options().stage >= 2)
    return offloaded_norm(max_norm, loss_scale, reduce, mp != nullptr);
  if (mp) return optim::clip_grad_norm(pieces, counted, max_norm, reduce, loss_scale);
  return optim::clip_grad_norm(pieces, max_norm, reduce, false, loss_scale);
}

// Note [Offloaded gradients] (zero_runtime.cpp): the max comes from the pieces' notes, the sum
// from the sums noted as they were written or, where those do not cover the global max's shift,
// by reading the piece back (one read ahead; Note [Offloaded norm]), and clipping is left to the
// optimizer's reads.
// With model parallelism the sum counts each parameter once (Note [Model-parallel norm]); a
// replicated parameter's copies are equal, so the max needs no such care.
double ShardedDataParallel::offloaded_norm(double max_norm, double loss_scale,
                                           const optim::NormReduction& reduce, bool counted) {
  ZeroRuntime& rt = *rt_;
  std::vector<ZeroUnit*> units;
  float local_max = 0.0f;
  for (ZeroUnit& u : rt.units()) {
    if (u.grad_region < 0) continue;
    units.push_back(&u);
    local_max = std::max(local_max, u.grad_max);
  }
  auto local_sum = [&](int shift) {
    __int128 sum = 0;
    // Note [Offloaded norm]: from the sums taken as the pieces were written where they cover
    // the shift; the rest (and every piece under model parallelism) read back.
    std::vector<ZeroUnit*> units_read;
    for (ZeroUnit* u : units) {
      const std::optional<__int128> known =
          counted ? std::nullopt : ZeroRuntime::offloaded_norm_sum(*u, shift);
      if (known)
        sum += *known;
      else
        units_read.push_back(u);
    }
    std::vector<Tensor> buffers(units_read.size());
    std::vector<std::shared_ptr<IoTicket>> reads(units_read.size());
    auto start = [&](size_t k) {
      buffers[k] = io_buffer(units_read[k]->geo.piece, DType::f32, MemCategory::gradients);
      reads[k] = rt.offload()->read(units_read[k]->grad_region, buffers[k]);
    };
    for (size_t k = 0; k < units_read.size(); ++k) {
      if (k == 0) start(0);
      if (k + 1 < units_read.size()) start(k + 1);
      reads[k]->wait();
      const ZeroUnit& u = *units_read[k];
      if (counted) {
        const Tensor piece = buffers[k].flat_range(0, u.geo.piece);
        const int64_t begin = u.geo.piece_begin(rt.groups().grad->rank());
        for (const Tensor& t : counted_pieces(rt.layout(), u.index, begin, piece))
          sum += kernels::sum_squares_fixed(t, shift);
      } else {
        sum += kernels::sum_squares_fixed(buffers[k], shift);
      }
      buffers[k] = Tensor();
    }
    return sum;
  };
  const double scaled = optim::grad_norm(local_max, local_sum, reduce);
  if (!optim::is_finite_norm(scaled)) return scaled;
  *rt.grad_scale() = optim::unscale_clip_factor(scaled, max_norm, loss_scale);
  return scaled / loss_scale;
}

void ShardedDataParallel::sum_gradient(const std::string& name, comm::ProcessGroup& group) {
  ZeroRuntime& rt = *rt_;
  if (!rt.offload() || rt.options().stage < 2) {
    DataParallel::sum_gradient(name, group);
    return;
  }
  for_each_piece([&](ZeroUnit& u, optim::ParamSlice s, int64_t at) {
    if (s.name() != name || u.grad_region < 0 || s.shard.numel == 0) return;
    Tensor piece = io_buffer(u.geo.piece, DType::f32, MemCategory::gradients);
    rt.offload()->read(u.grad_region, piece)->wait();
    Tensor mine = piece.flat_range(at, s.shard.numel);
    group.all_reduce(mine)->wait();
    u.grad_max = kernels::max_abs(piece.flat_range(0, u.geo.piece));
    rt.offload()->write(u.grad_region, piece)->wait();
  });
}

void ShardedDataParallel::after_optimizer_step() {
  rt_->launch_updates();
}

void ShardedDataParallel::synchronize() {
  rt_->run_deferred();  // Note [Deferred step] (offload_store.h)
  rt_->wait_all_updates();
}

void ShardedDataParallel::for_each_held_unit(const UnitVisitor& fn, const std::vector<int>& units) {
  ZeroRuntime& rt = *rt_;
  rt.run_deferred();
  rt.wait_all_updates();
  for (int i : units) {
    ZeroUnit& u = rt.units().at(static_cast<size_t>(i));
    const Tensor full = rt.gather_for_read(u);
    fn(rt.model().global_unit(u.index), full);
    rt.reshard(u);
  }
}

ParallelStats ShardedDataParallel::last_step_stats() const {
  return rt_->step_stats();
}

}  // namespace braid::parallel
