// Options of the sharded data-parallel strategies (ShardedDataParallel) and the per-unit geometry.
//
// Note [Shard geometry]: N ranks of data parallelism, shard groups of S ranks (S divides N;
// HYBRID_SHARD has S < N), R = N / S replicas. Every unit's elements are padded to a multiple of
// N x 16 and cut into N equal pieces; data-parallel rank c (= world rank: r S + s for replica r,
// shard position s) owns piece c: its reduced gradient and its optimizer state (8 bytes per
// element for AdamW). A rank's parameter shard (ZeRO-3) is the R pieces r' S + s, r' < R, kept
// one after the other: gathering a unit is R all-gathers over the shard group (one per replica
// block of S pieces), and after the optimizer step the replicas exchange their updated pieces
// with one all-gather over the replicate group. With S = N (no hybrid) that is one piece and one
// all-gather, as plain ZeRO-3. Gradients are always reduce-scattered over all N ranks, in rank
// order, which is what makes every strategy agree with DDP bit for bit (docs/design.md
// "Determinism"); the price for hybrid is that this reduction crosses the replica groups.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "braid/core/dtype.h"
#include "braid/parallel/plan.h"

namespace braid::parallel {

struct ZeroOptions {
  std::string group_name = "dp";  // the group in describe() ("dp x cp" with context parallelism)
  int stage = 3;                  // 1: optimizer state sharded; 2: + gradients; 3: + parameters
  // Stage 3: free a unit's gathered parameters after its forward (FULL_SHARD) or keep them until
  // its backward is done (SHARD_GRAD_OP).
  bool reshard_after_forward = true;
  int sharding_factor = 0;  // stage 3: ranks per parameter shard group, S (0: all N)
  // Reduce every micro-step and keep the sharded sum (DeepSpeed's stage 2/3, low memory), or
  // accumulate the micro-steps locally and reduce once (no_sync: full gradients are kept).
  bool sync_each_batch = true;
  bool forward_prefetch = true;   // gather unit i+1 when unit i's forward starts
  bool backward_prefetch = true;  // gather unit i-1 when unit i's backward starts
  int limit_all_gathers = 2;      // sharded units gathered or being gathered at once
  // Stage 3: units with at most this many elements are not sharded (kept whole on every rank).
  int64_t param_persistence_threshold = 0;
  bool find_unused_parameters = false;
  DType reduce_dtype =
      DType::f32;  // Note [Reduce dtype] (parallel/ddp/distributed_data_parallel.h)
  // Offload to a slow tier (DeepSpeed's offload_optimizer / offload_param with device nvme): the
  // optimizer state in a file per rank, paged in unit by unit around the step (Note [Offload
  // pages], offload_store.h); with offload_params (stage 3) the parameter shards too, read ahead
  // of their all-gather and updated in place by the optimizer.
  bool offload_optimizer = false;
  bool offload_params = false;
  // offload_optimizer cpu (DeepSpeed's ZeRO-Offload): the optimizer state in host memory and the
  // step on the CPU while the model trains on a device (Note [Optimizer state on the host],
  // optim/state_store.h).
  bool offload_optimizer_host = false;
  std::string offload_dir;      // the files' directory (each rank its own file)
  int offload_rank = -1;        // the file's name: rank<offload_rank>.bin (-1: the dp rank)
  std::string label = "zero3";  // how describe() names it ("fsdp FULL_SHARD", ...)
  // Per unit, by name: what differs from the options above (FSDP2's per-module policy; stage 3).
  std::map<std::string, UnitPolicy> unit_policies;
};

struct UnitGeometry {
  int64_t padded = 0;  // unit elements padded to a multiple of N x 16
  int64_t piece = 0;   // padded / N: one rank's reduced gradient / optimizer piece
  int64_t piece_begin(int c) const { return c * piece; }
};

}  // namespace braid::parallel
