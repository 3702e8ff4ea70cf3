// ShardedDataParallel::materialize: each unit's pieces filled where this rank keeps them (Note
// [Ranged loads], parallel/step.h), its shard, master and gradient buffers set up, and the pieces
// the other ranks filled gathered (ZeRO-1/2). The strategy's steps: sharded_data_parallel.cpp.
#include "braid/parallel/zero/sharded_data_parallel.h"

#include <filesystem>

#include "braid/comm/collective_guard.h"
#include "braid/comm/read_and_share.h"
#include "braid/core/error.h"
#include "braid/core/fault_ahead.h"
#include "braid/core/memory_tracker.h"
#include "braid/kernels/ops.h"
#include "braid/parallel/zero/offload_file.h"
#include "braid/parallel/zero/zero_runtime.h"

namespace braid::parallel {

namespace {
// The policy of the unit named `name` (empty where the options hold).
UnitPolicy unit_policy(const ZeroOptions& o, const std::string& name) {
  auto it = o.unit_policies.find(name);
  return it == o.unit_policies.end() ? UnitPolicy{} : it->second;
}

// Every per-unit policy names a unit of the whole model (a pipeline stage holds some), and asks
// what its stage can do.
void check_unit_policies(const ZeroOptions& o, const nn::ParamLayout& layout) {
  for (const auto& [name, policy] : o.unit_policies) {
    BRAID_CHECK(o.stage == 3, "parallel.unsharded_units / keep_gathered_units name '", name,
                "': per-unit policies apply to sharded parameters (zero3 / fsdp), not ", o.label);
    std::string names;
    bool found = false;
    for (const nn::UnitInfo& u : layout.units()) {
      found = found || u.name == name;
      names += (names.empty() ? "" : ", ") + u.name;
    }
    (void)policy;
    BRAID_CHECK(found, "parallel.unsharded_units / keep_gathered_units: '", name,
                "' names no unit of the model (", names, ")");
  }
}
}  // namespace

void ShardedDataParallel::materialize(nn::Model& model, const MaterializeOptions& options) {
  BRAID_CHECK(!materialized_, "ShardedDataParallel: materialize() called twice");
  check_unit_policies(rt_->options(), model.full_layout());
  ZeroRuntime& rt = *rt_;
  const ZeroOptions& o = rt.options();
  const ZeroGroups& g = rt.groups();
  const nn::ParamLayout layout = model.layout().with_padding(g.n * nn::ParamLayout::kAlign);
  const int c = g.grad->rank();
  auto& units = rt.units();
  units.resize(layout.units().size());
  const DType compute = options.param_dtype;
  const bool mixed = compute != DType::f32;  // Note [Mixed-precision units]
  // Note [Ranged loads] (step.h): a ZeRO-1/2 rank fills its piece of each unit, as its optimizer
  // step updates it, after the agreement below (`shared`); the other pieces come from their
  // owners (ZeroRuntime::launch_update).
  const bool shared = o.stage <= 2 && options.fill_range;
  comm::all_ranks_or_throw(g.grad.get(), [&] {
    if (o.offload_optimizer) {
      const int file_rank = o.offload_rank >= 0 ? o.offload_rank : g.grad->rank();
      const std::string file = "rank" + std::to_string(file_rank) + ".bin";
      rt.set_offload(std::make_shared<OffloadFile>(std::filesystem::path(o.offload_dir) / file));
    }
    if (o.stage <= 2)
      model.materialize(/*allocate_grads=*/o.stage == 1, layout.pad_multiple(), compute,
                        /*masters=*/!mixed);
    for (size_t k = 0; k < units.size(); ++k) {
      const nn::UnitInfo& info = layout.units()[k];
      ZeroUnit& u = units[k];
      u.index = static_cast<int>(k);
      u.geo = {info.padded, info.padded / g.n};
      const UnitPolicy policy = unit_policy(o, info.name);
      u.sharded = o.stage == 3 &&
                  policy.shard_parameters.value_or(info.numel > o.param_persistence_threshold);
      u.reshard_after_forward = policy.reshard_after_forward.value_or(o.reshard_after_forward);
      u.keep_gathered = info.users.size() > info.owners.size() || k + 1 == units.size();
      for (int p : info.params) {
        const bool trainable = layout.params()[static_cast<size_t>(p)].param->requires_grad;
        u.trainable += trainable;
        u.has_frozen = u.has_frozen || !trainable;
      }
    }
    // Every unit's shard in one buffer, and every reduced gradient piece in another: large
    // allocations, which fault in as huge pages (Note [Large host allocations],
    // core/storage.cpp), where a unit's own would come from the heap 4 KiB at a time (a new
    // process building gpt2-small's shards for a load took 0.35-0.44 s so, 0.26-0.34 s now).
    const bool own_grad_pieces =
        !(o.stage == 1 && !o.sync_each_batch) && !(o.offload_optimizer && o.stage >= 2);
    int64_t shard_total = 0, grad_total = 0;
    for (const ZeroUnit& u : units) {
      if (u.sharded && !o.offload_params) shard_total += u.geo.piece * g.r;
      if (own_grad_pieces) grad_total += u.geo.piece;
    }
    Tensor shards = shard_total > 0
                        ? Tensor::empty(Shape{shard_total}, DType::f32, MemCategory::parameters)
                        : Tensor();
    Tensor grad_pieces = grad_total > 0
                             ? Tensor::zeros(Shape{grad_total}, DType::f32, MemCategory::gradients,
                                             MemoryScope::current_tracker())
                             : Tensor();
    int64_t shard_at = 0, grad_at = 0;
    for (size_t k = 0; k < units.size(); ++k) {
      const nn::UnitInfo& info = layout.units()[k];
      ZeroUnit& u = units[k];
      // A unit held whole in the compute dtype keeps this rank's piece of its f32 masters.
      if (!u.sharded && mixed)
        u.master = Tensor::empty(Shape{u.geo.piece}, DType::f32, MemCategory::parameters);
      // The unit's f32 values whole, where the fill gives them so; what this rank keeps comes from
      // them. A sharded unit with a ranged fill has none: its pieces are filled in place.
      Tensor full;
      if (o.stage <= 2) {
        const nn::FlatRange r = model.flat().unit_range(u.index);
        u.full = model.flat().compute().flat_range(r.offset, r.size);
        if (o.stage == 1) u.grads = model.flat().grads().flat_range(r.offset, r.size);
        if (!shared) {
          full = mixed ? Tensor::zeros(Shape{info.padded}, DType::f32, MemCategory::parameters,
                                       MemoryScope::current_tracker())
                       : u.full;
          options.fill(u.index, full);
        }
      } else if (u.sharded && options.fill_range) {
        // Only the pieces this rank keeps, filled where it keeps them (below): a checkpoint load
        // reads its shard alone, and no whole unit is allocated for it.
        layout.declare_unit(u.index);
      } else {
        full = Tensor::zeros(Shape{info.padded}, DType::f32, MemCategory::parameters,
                             MemoryScope::current_tracker());
        options.fill(u.index, full);
        // A unit held whole in the compute dtype gets its own buffer (filled below); a sharded
        // one is bound to `full` only to create its parameters' Variables.
        const Tensor bound = !u.sharded && mixed ? Tensor::empty(Shape{info.padded}, compute,
                                                                 MemCategory::parameters)
                                                 : full;
        layout.bind_unit(u.index, bound, Tensor());
        if (!u.sharded) u.full = bound;
      }
      if (!u.sharded && mixed && full.defined()) {
        kernels::cast(u.full, full);
        u.master.copy_(full.flat_range(u.geo.piece_begin(c), u.geo.piece));
      }
      if (u.sharded) {
        const int64_t piece = u.geo.piece;
        // Piece k of the unit into `to`: filled there, or taken from the whole unit.
        auto take = [&](int64_t k, Tensor to) {
          if (full.defined())
            to.copy_(full.flat_range(k * piece, piece));
          else
            options.fill_range(u.index, k * piece, (k + 1) * piece, std::move(to));
        };
        if (o.offload_params) {
          // The shard goes straight to its region of the file (Note [Offload pages]).
          const int64_t staged = (piece + 1023) / 1024 * 1024;
          u.param_region = rt.offload()->add_region(staged * 4);
          rt.offload()->reserve();
          Tensor stage = io_buffer(piece, DType::f32, MemCategory::parameters);
          take(g.shard_pos, stage.flat_range(0, piece));
          rt.offload()->write(u.param_region, stage)->wait();
          if (mixed) {  // Note [Offloaded compute copy]; on the host as the pages
            u.compute_shard = Tensor::empty(Shape{piece}, compute, MemCategory::parameters,
                                            MemoryScope::current_tracker(), Device::cpu());
            kernels::cast(u.compute_shard, stage.flat_range(0, piece));
          }
        } else {
          // Note [Shard geometry]: pieces r' S + s for r' < R, one after the other.
          u.shard = shards.flat_range(shard_at, piece * g.r);
          shard_at += piece * g.r;
          for (int r = 0; r < g.r; ++r)
            take(r * g.s + g.shard_pos, u.shard.flat_range(r * piece, piece));
        }
        layout.unbind_unit(u.index);
      }
      if (o.stage == 1 && !o.sync_each_batch) {
        u.grad_piece = u.grads.flat_range(u.geo.piece_begin(c), u.geo.piece);
      } else if (o.offload_optimizer && o.stage >= 2) {
        // Note [Offloaded gradients]: the reduced piece lives in the file.
        if (u.trainable > 0)
          u.grad_region = rt.offload()->add_region((u.geo.piece + 1023) / 1024 * 1024 * 4);
      } else {
        u.grad_piece = grad_pieces.flat_range(grad_at, u.geo.piece);
        grad_at += u.geo.piece;
      }
    }
    if (rt.offload()) rt.offload()->reserve();  // a full disk fails here, at start
  });
  if (shared) {
    // Each unit's all_gather issued as soon as this rank's piece of it is filled (Note [Shared
    // as read], comm/read_and_share.h); in mixed precision the piece is the master's, rounded.
    std::vector<Tensor> gathered;  // Note [Faulting in ahead] (core/fault_ahead.h)
    for (const ZeroUnit& u : units) gathered.push_back(u.full);
    const FaultAhead ahead(std::move(gathered));
    comm::ReadAndShare load(g.grad.get());
    for (ZeroUnit& u : units) {
      const int64_t begin = u.geo.piece_begin(c), end = begin + u.geo.piece;
      Tensor piece = u.full.flat_range(begin, u.geo.piece);
      load.step(
          [&] {
            options.fill_range(u.index, begin, end, mixed ? u.master : piece);
            if (mixed) kernels::cast(piece, u.master);
          },
          [&](comm::ProcessGroup& group) { return group.all_gather(u.full, piece); });
    }
    load.finish();
  }
  rt.attach(model, layout, options.param_dtype);
  ZeroRuntime::register_hooks(rt_);
  materialized_ = true;
}

}  // namespace braid::parallel
