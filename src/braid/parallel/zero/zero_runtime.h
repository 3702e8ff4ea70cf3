// ZeroRuntime: the per-unit machinery behind ShardedDataParallel (internal to parallel/zero). It
// owns what this rank holds of every unit and moves it on the model's hooks:
//
//   forward pre   (any user module)  wait for the unit's after-step update; gather (stage 3);
//                                    prefetch the next unit
//   forward post                     free the gathered parameters (FULL_SHARD, or always when
//                                    no gradient is recorded), unless the unit is kept
//   backward pre                     gather again; bind a zeroed gradient buffer (stage 2/3);
//                                    prefetch the previous unit
//   gradient final (every trainable  reduce-scatter the unit's gradients over all ranks (in
//   parameter's post-accumulate)     descending unit order, as DDP launches its buckets); free
//                                    the gathered parameters (stage 3)
//
// Note [Reduce order]: reduce-scatters are launched in descending unit order whatever order the
// units finish in, so every rank issues the same collectives even if hooks fire differently.
// Note [Kept units]: the unit the LM head borrows (tied embeddings) and the last unit stay
// gathered from their forward to the end of their backward (FSDP keeps its root the same way);
// units with frozen parameters are freed only when the whole backward is over, because a node
// that reads a frozen weight is not counted by any gradient hook.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "braid/comm/work.h"
#include "braid/core/tensor_pool.h"
#include "braid/nn/transformer.h"
#include "braid/parallel/data_parallel.h"
#include "braid/parallel/zero/offload_file.h"
#include "braid/parallel/zero/zero_groups.h"
#include "braid/parallel/zero/zero_options.h"

namespace braid::parallel {

class DeferredPages;  // offload_store.h

struct ZeroUnit {
  int index = 0;
  UnitGeometry geo;
  bool sharded = false;        // parameters sharded (stage 3, above the persistence threshold)
  bool keep_gathered = false;  // Note [Kept units]
  bool reshard_after_forward = true;  // its policy (ZeroOptions, UnitPolicy)
  bool has_frozen = false;
  int trainable = 0;  // parameters that require grad

  // Whole parameters [padded] in the compute dtype, which the parameters are views of: held
  // (stage 1/2, persistent) or gathered. Note [Mixed-precision units].
  Tensor full;
  Tensor shard;         // sharded: the f32 R pieces this rank keeps [R x piece]
  Tensor master;        // not sharded, compute dtype not f32: this rank's f32 piece [piece]
  Tensor gather_src;    // sharded, compute dtype not f32: the shard cast for its all-gather
  Tensor grads;         // [padded]: stage 1 a FlatBuffer view; stage 2/3 bound during backward
  Tensor grad_piece;    // [piece]: this rank's reduced gradient (stage 1 without sync: a view)
  Tensor reduce_stage;  // [padded] in the reduce dtype while its reduce-scatter runs

  int param_region = -1;  // offloaded: the shard's region of the offload file (else in `shard`)
  int grad_region = -1;   // offloaded: the reduced gradient piece's region (else grad_piece)
  float grad_max = 0;     // offloaded: max |g| of the piece as last written (for the norm)
  // offloaded: the piece's exact sums of squares at the norm's shift for a global max of up to
  // 2^(kNormSums - 1) times the largest piece max written before it in the micro-step (its own
  // included), from norm_shift down (Note [Offloaded norm])
  static constexpr int kNormSums = 4;
  bool norm_sums_valid = false;  // taken from the piece as last written
  int norm_sums_taken = 0;       // of norm_sums (set_offloaded_norm_sums_for_testing)
  int norm_shift = 0;
  __int128 norm_sums[kNormSums] = {};
  Tensor shard_stage;    // offloaded: the shard read back for its all-gather
  Tensor compute_shard;  // offloaded, compute dtype not f32: the shard cast to it, in memory
                         // (Note [Offloaded compute copy], offload_store.h)
  std::shared_ptr<IoTicket> shard_read;

  enum class Params { resident, reading, gathering, gathered };
  Params params = Params::resident;  // sharded units only
  std::vector<std::shared_ptr<comm::Work>> gathers;
  std::shared_ptr<comm::Work> update;  // after-step all-gather in flight
  bool held = false;   // gathered on purpose from forward to backward (not counted by the limit)
  int arrived = 0;     // gradient hooks fired in this backward
  bool ready = false;  // every trainable gradient is final
  int reductions = 0;  // reduced micro-steps folded into grad_piece this step
};

class ZeroRuntime {
 public:
  ZeroRuntime(ZeroOptions options, ZeroGroups groups);

  const ZeroOptions& options() const { return opt_; }
  const ZeroGroups& groups() const { return groups_; }
  std::vector<ZeroUnit>& units() { return units_; }
  const nn::ParamLayout& layout() const { return layout_; }
  const nn::Model& model() const { return *model_; }
  ParallelStats& stats() { return stats_; }
  // stats() with the offload file's traffic since the step began (ParallelStats::offload_*).
  ParallelStats step_stats() const;

  // Called by ShardedDataParallel::materialize once the units hold their storage.
  void attach(nn::Model& model, nn::ParamLayout layout, DType compute);
  DType compute_dtype() const { return compute_; }
  // The f32 master weights of this rank's piece of u (undefined when offloaded).
  Tensor master_piece(ZeroUnit& u) const;
  // Whether the optimizer writes u's compute-dtype piece as it updates the masters (Note
  // [Compute copy in the step], optim/optimizer.h): a unit held whole (stage 1/2, persistent)
  // with f32 masters of its own, stepped where they live (not on the host for a device).
  bool optimizer_writes_compute(const ZeroUnit& u) const;
  void set_offload(std::shared_ptr<OffloadFile> file) { offload_ = std::move(file); }
  // The offloaded optimizer step's pages left for forward, or null (Note [Deferred step],
  // offload_store.h); synchronize() runs them all.
  void set_deferred(DeferredPages* pages) { deferred_ = pages; }
  void run_deferred();  // every pending page, and the write-backs waited for
  const std::shared_ptr<OffloadFile>& offload() const { return offload_; }
  // Offloaded gradients are clipped where they are read back (Note [Offloaded gradients]).
  float* grad_scale() { return &grad_scale_; }
  static void register_hooks(const std::shared_ptr<ZeroRuntime>& self);

  void begin_micro_step(int64_t micro_step, int64_t accumulation_steps);
  void end_micro_step();
  // ShardedDataParallel::reduce_accumulated: a last micro-step without a backward in which every
  // unit counts as ready (stages 1 and 2 without sync_each_batch).
  void reduce_accumulated();
  // Note [Update overlap] (unit_ordered_store.h): the optimizer reports each unit whose
  // updates are done (unit_updated); exchanges of updated pieces are issued in unit order as
  // soon as every earlier unit is done too, so all ranks issue them in the same order.
  // slices_per_unit: this rank's trainable optimizer slices per unit (0: nothing to wait for).
  void set_slices_per_unit(std::vector<int> slices_per_unit);
  void unit_updated(int u);
  void launch_updates();  // after the optimizer step: whatever is left
  void wait_update(ZeroUnit& u);
  void wait_all_updates();
  // Gathers u's full f32 master weights for reading outside forward (export), in a buffer of
  // its own or u.full; collective. Follow with reshard(u).
  Tensor gather_for_read(ZeroUnit& u);
  void reshard(ZeroUnit& u);
  // An offloaded piece's exact sum of squares at `shift` from the sums taken as it was written,
  // or nullopt when they do not cover that shift: read it back (Note [Offloaded norm]).
  static std::optional<__int128> offloaded_norm_sum(const ZeroUnit& u, int shift);

 private:
  // owner: the module owns parameters of unit u (a borrower, e.g. a tied LM head, prefetches
  // nothing: the unit next to the one it borrows is not the one it needs next).
  void on_forward_pre(int u, bool owner);
  void on_forward_post(int u);
  void on_backward_pre(int u, bool owner);
  void on_grad_ready(int u);

  void ensure_gathered(ZeroUnit& u);
  void start_read(ZeroUnit& u);
  void start_gather(ZeroUnit& u);
  // The offloaded shard of u, read back (waits for a read ahead when there is one).
  Tensor read_shard(ZeroUnit& u);
  void finish_gather(ZeroUnit& u);
  void prefetch(int u);
  int gathered_in_flight() const;
  void ensure_grads(ZeroUnit& u);
  void bind_grads(ZeroUnit& u, const Tensor& grads);
  void launch_ready_reductions();
  void launch_update(ZeroUnit& u);
  void advance_updates();
  void fold(ZeroUnit& u);
  void fold_offloaded(ZeroUnit& u, const Tensor& chunk);
  void finish_grad_write();
  void poll_reductions(bool wait_all);
  // Whether u's page of a deferred step is still to run (Note [Deferred step]).
  bool deferred_pending(const ZeroUnit& u) const;
  // u's page of a deferred step, run if pending: its updated f32 shard, else undefined.
  Tensor run_deferred(ZeroUnit& u);
  int c() const { return groups_.grad->rank(); }

  ZeroOptions opt_;
  ZeroGroups groups_;
  std::shared_ptr<OffloadFile> offload_;
  DeferredPages* deferred_ = nullptr;
  nn::Model* model_ = nullptr;
  nn::ParamLayout layout_;
  DType compute_ = DType::f32;
  std::vector<ZeroUnit> units_;
  int64_t micro_step_ = 0, accumulation_steps_ = 1;
  bool reducing_ = true;  // this micro-step's gradients are reduced (sync_each_batch or last)
  bool in_backward_ = false;
  int next_reduce_ = -1;  // Note [Reduce order]
  std::vector<int> slices_per_unit_;
  std::vector<bool> updated_;  // this step's optimizer is done with the unit
  int next_update_ = 0;
  struct Pending {
    int unit;
    std::shared_ptr<comm::Work> work;
  };
  std::deque<Pending> pending_;
  std::shared_ptr<IoTicket> grad_write_;  // the last offloaded gradient piece being written
  Tensor grad_stage_;                     // ... from here
  float grad_scale_ = 1.0f;
  float written_max_ = 0;  // the largest max |g| of the pieces written this micro-step
  ParallelStats stats_;
  OffloadFile::Totals io_mark_;  // the offload file's counters when the step began (step_stats())
  // Gathered units' parameters and gradients, reused from step to step (Note [Recycled
  // tensors]): GPT-2 medium's embedding unit was a fresh 103 MB + 206 MB mapping every step.
  // Two wait at most, as many as a backward holds gradients (ensure_grads), so what waits
  // through a forward stays within that.
  TensorPool recycled_{2};
};

}  // namespace braid::parallel
