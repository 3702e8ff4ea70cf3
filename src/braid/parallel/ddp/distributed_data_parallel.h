// DistributedDataParallel: gradients of a model whose parameters live in one flat buffer are
// all-reduced over a process group in buckets while backward still runs.
//
// Note [DDP buckets]: parameters sit in the flat buffer in order of first use in forward, so
// their gradients become final roughly from the end of the buffer to its start. Buckets are
// therefore contiguous {offset, size} ranges of the flat gradient buffer, cut from the end
// (bucket 0 holds the last parameters), each about `bucket_mb`; a bucket's all-reduce runs
// straight on a view of the gradient buffer, with no copy. A parameter's post-accumulate hook
// counts its bucket down; a bucket whose count reaches zero is launched, and buckets are always
// launched in index order, so every rank issues the same collectives in the same order even if
// hooks fire in a different order. finish_backward() launches what is left and waits.
//
// Note [DDP averaging]: gradients are summed, not averaged. The loss of each micro-batch is
// divided by the number of target tokens of the whole optimizer step over all ranks (the
// trainer passes it as the loss denominator), so the summed gradient is exactly the gradient
// of the mean loss over the global batch, whatever the world size and accumulation.
//
// Note [Reduce dtype]: gradients accumulate in f32 (the buffer's dtype); with a lower reduce
// dtype (FSDP's MixedPrecision.reduce_dtype, training.reduce_dtype) each bucket is cast into a
// staging buffer of that dtype when it launches, all-reduced there (half the bytes for bf16),
// and cast back into the gradient buffer once the backward's reductions are done. The sum then
// carries that dtype's rounding; the optimizer still steps f32 gradients. ZeRO casts each unit
// the same way around its reduce-scatter.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "braid/autograd/variable.h"
#include "braid/comm/process_group.h"

namespace braid::parallel {

struct DdpParam {
  autograd::Variable param;  // value and grad are views of the flat buffers at `offset`
  int64_t offset = 0;        // element offset in the flat buffers
};

struct DdpOptions {
  double bucket_mb = 25.0;
  bool find_unused_parameters = false;  // allow trainable parameters with no gradient
  bool broadcast_parameters = true;     // rank 0's weights to everyone at construction
  // The dtype gradients travel and are summed in (FSDP's MixedPrecision.reduce_dtype): other
  // than the gradient buffer's, each bucket is cast into a staging buffer of this dtype, reduced
  // there and cast back (Note [Reduce dtype]).
  DType reduce_dtype = DType::f32;
};

struct DdpBucket {
  int64_t offset = 0;  // range of the flat gradient buffer
  int64_t size = 0;
  std::vector<int> params;  // indices into the parameter list
};

struct DdpStepStats {
  int64_t buckets_launched_in_backward = 0;  // launched while backward was still running
  int64_t buckets = 0;
  int64_t bytes = 0;
  double exposed_wait_ms = 0;  // time finish_backward() spent waiting for communication
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(std::vector<DdpParam> params, Tensor flat_params, Tensor flat_grads,
                          std::shared_ptr<comm::ProcessGroup> group, DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // With sync off (no_sync), backward only accumulates local gradients; the next backward
  // with sync on reduces the accumulated sum.
  void set_sync(bool sync);
  bool sync() const;

  // After each backward with sync on: launches the buckets not launched yet (checking for
  // parameters that received no gradient) and waits for all of them.
  void finish_backward();
  // Pipeline schedules: the backwards so far ran with sync off; reduces everything they
  // accumulated now (every parameter counts as used) and waits, as finish_backward().
  void reduce_accumulated();

  const std::vector<DdpBucket>& buckets() const;
  const DdpStepStats& last_step_stats() const;
  comm::ProcessGroup& group() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// Scoped no_sync: sync off inside, restored after.
class NoSyncGuard {
 public:
  explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), prev_(ddp.sync()) {
    ddp_.set_sync(false);
  }
  ~NoSyncGuard() { ddp_.set_sync(prev_); }
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;

 private:
  DistributedDataParallel& ddp_;
  bool prev_;
};

// Cuts buckets as Note [DDP buckets] says. `trainable[i]` false excludes parameter i (and a
// bucket never spans one). Exposed for tests.
std::vector<DdpBucket> plan_buckets(const std::vector<int64_t>& offsets,
                                    const std::vector<int64_t>& sizes,
                                    const std::vector<bool>& trainable, int64_t bucket_elems);

}  // namespace braid::parallel
