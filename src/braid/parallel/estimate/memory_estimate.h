// What a rank keeps at its peak, per MemoryTracker category, for a model, a data-parallel
// strategy and a micro-batch: `braid estimate-memory`, and what an OutOfMemory at start says
// would fit. strategy_memory_test and memory_estimate_test hold every number to the tracker's
// measured peaks (within 10%).
//
// Per rank, AdamW (8 bytes of f32 state per parameter), P parameter elements of the layout (of
// this rank's tensor-parallel slices) padded for the data-parallel ranks N, S ranks per shard
// group (under context parallelism N = dp x cp and S = sharding_factor x cp: the cp ranks of a
// batch hold the same parameters and reduce and shard with the dp ranks), a = bytes of the compute
// dtype (4 for fp32, 2 for bf16/fp16; master weights, gradients and optimizer state stay f32):
//   ddp    params 4P (+ aP compute copy)  grads 4P                  optimizer 8P
//   zero1  params 4P, or aP + 4P/N        grads 4P (+ 4P/N with sync_each_batch)  8P/N
//   zero2  as zero1                       grads 4P/N + in flight   optimizer 8P/N
//   zero3  params 4P/S + a x gathered units in flight; grads as zero2; optimizer 8P/N
// "In flight" are whole units (Note [Units in flight]); under sequence parallelism stage 3 keeps
// every unit gathered from forward to backward (Note [Sequence-parallel gathers]). Without
// sync_each_batch stages 2 and 3 keep every unit's full gradients between micro-steps (4P/N + 4P),
// as FSDP's no_sync does. Activations: activation_estimate.h. Communication: comm_estimate.h (the
// process groups) plus the staging of Note [Buffer estimate]. Scratch: scratch_estimate.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "braid/core/dtype.h"
#include "braid/nn/model_config.h"
#include "braid/parallel/estimate/comm_estimate.h"
#include "braid/parallel/plan.h"

namespace braid::parallel {

struct MemoryEstimate {
  std::string strategy;  // "ddp", "zero3", "fsdp SHARD_GRAD_OP", "zero1 tp2 pp2", ...
  int stage = 0;         // the pipeline stage whose rank this is (0 without a pipeline)
  int64_t parameters = 0, gradients = 0, optimizer_state = 0, activations = 0;
  int64_t communication = 0, scratch = 0;  // the process groups' and the kernels' buffers
  // Of `gradients`: a block's gradients held while they are reduced beside the next block's
  // backward (stages 2 and 3, Note [Units in flight]); where each reduction ends before the next
  // block's backward begins (ranks as threads, a quiet network) the peak is that much lower.
  int64_t gradients_overlap = 0;
  int64_t total() const {
    return parameters + gradients + optimizer_state + activations + communication + scratch;
  }
  int64_t training_state() const { return parameters + gradients + optimizer_state; }
};

// What to estimate: the model (its activation_checkpointing is the policy), the strategy as the
// Trainer builds it (spec.micro_batch_size and spec.seq_len size the activations;
// spec.tensor_parallel_size splits the model as Note [Tensor-parallel layout] says, with
// spec.sequence_parallel its residual stream too (Note [Sequence-parallel activations]);
// spec.pipeline_parallel_size into stages of blocks, uniform or balanced by parameters
// (Note [Stage balance]), pipeline_virtual_stages chunks a rank under interleaved_1f1b, under
// any schedule (gpipe, 1f1b, interleaved_1f1b, zb_h1: Note [Pipeline activations]); and
// spec.context_parallel_size every sequence, ring or ulysses (Note [Context-parallel
// activations]); the data-parallel strategy then runs over world / (tp x pp) = dp x cp ranks,
// its batch split over dp), the world size, the compute dtype, the
// optimizer's bytes of state per parameter (AdamW 8, SGD with momentum 4, without 0) and the
// micro-batches of a step (gradient accumulation: what a pipeline keeps in flight). A balance
// by measured time is not modelled (throws naming it: its split is made when the run starts).
struct MemoryEstimateInputs {
  nn::ModelConfig model;
  ParallelPlan spec;
  int world_size = 1;
  DType compute = DType::f32;
  int64_t optimizer_bytes_per_param = 8;
  int64_t micro_batches = 1;
  int pipeline_stage = -1;  // the pipeline stage to estimate; -1: the one with the largest total
  int threads = 1;          // OpenMP threads per rank (kernel scratch, Note [Scratch estimate])
  CommBackend backend;      // Note [Communication estimate]
  bool on_device = false;   // the model runs on a device (training.device cuda)
};

// Throws braid::Error naming the field for an unknown strategy, world size < 1, a shard group
// that does not divide the world, micro-batch or sequence length < 1, a sequence that does not
// split over cp, Ulysses with heads that do not divide by it, sequence parallelism without tp
// or with tokens that do not divide by it, or a schedule the pipeline refuses (check_schedule).
MemoryEstimate estimate_memory(const MemoryEstimateInputs& in);

// The strategies `--strategy all` compares, least sharded first: ddp, zero1, zero2, zero3.
std::vector<std::string> estimated_strategy_names();

// fp32 AdamW training state (parameters, gradients, optimizer; activations and buffers left
// out) of each of estimated_strategy_names() for `params` parameter elements whose largest unit
// has `largest_unit` on `ranks` data-parallel ranks: what an OutOfMemory at start advises
// (Note [Memory advice], trainer.cpp), from the same formulas with every unit that size.
std::vector<MemoryEstimate> estimate_training_state(int64_t params, int64_t largest_unit,
                                                    int ranks);

// "ddp 23.4 GiB, zero1 14.6 GiB, zero2 12.4 GiB, zero3 6.3 GiB" (training state only)
std::string describe_estimates(const std::vector<MemoryEstimate>& estimates);

}  // namespace braid::parallel
