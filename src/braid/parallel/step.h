// What one training step hands the parallel runtime and gets back (parallelism.h): the
// micro-batches, the step's loss, what materialisation fills units with, and the step's
// communication statistics.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>

#include "braid/core/dtype.h"
#include "braid/core/tensor.h"

namespace braid::parallel {

struct MaterializeOptions {
  // Fills unit u of model.layout() with the full parameters of the whole model's unit
  // model.global_unit(u) (a buffer holding the unit alone, f32, at least
  // full_layout().units()[model.global_unit(u)].numel elements; padding must stay zero). Called
  // on every rank for each of its units, in order: seeded initialisation
  // (ParamLayout::init_unit) or a checkpoint reader.
  std::function<void(int unit, Tensor& unit_params)> fill;
  // Optional: fills `part` (f32, end - begin elements) with elements [begin, end) of unit u of
  // model.layout() as this rank holds it (its tensor-parallel slices), padding zero: the range
  // alone, wherever the strategy keeps it. When set, a strategy that keeps part
  // of a unit (ZeRO-3's shards) fills only what it keeps, and tensor parallelism fills its
  // slices alone instead of slicing whole units: a checkpoint load reads only this rank's ranges.
  // Note [Ranged loads]: a checkpoint's reader (each range from whichever files hold it, any
  // saved layout) or the seeded initialisation (each parameter's stream advanced to the range,
  // ParamLayout::init_unit_range). Each strategy fills only what it must: ZeRO-3 the pieces
  // it keeps; ZeRO-1/2, which keep every parameter but step their piece of each unit, that
  // piece, gathering the rest from its owners as after an optimizer step; a DDP replica the
  // parameters it owns (comm::owners_by_size: those it saved, its own file), sent to the others,
  // and no broadcast of rank 0's after it. The replicas' optimizer state likewise
  // (DataParallel::optimizer_replicas). So every byte of a
  // checkpoint is read, and every parameter drawn, once over the group, where every rank read
  // and drew all of them before (gpt2-small on 2 ranks under zero1: 0.411 GB read per rank for
  // its parameters instead of 0.768). Each part's gather or broadcast is issued as soon as it is
  // filled, and a failed fill fails every rank after the last one, so no rank waits in one for
  // a rank whose fill failed (Note [Shared as read], comm/read_and_share.h).
  std::function<void(int unit, int64_t begin, int64_t end, Tensor part)> fill_range;
  // The dtype forward and backward compute in (docs/design.md "Precision"): parameters are bound
  // to a compute copy in this dtype, refreshed from the f32 masters after every optimizer step;
  // gradients, masters and optimizer state stay f32.
  DType param_dtype = DType::f32;
};

// A step's micro-batches, as Parallelism::forward_backward() takes them.
struct MicroBatches {
  int64_t count = 1;
  // Micro-batch m's ids and targets ([B, T] i32); called once per m, in increasing m.
  std::function<std::pair<Tensor, Tensor>(int64_t m)> next;
  // Packed rows (Note [Packed rows], nn/sequence_layout.h): micro-batch m's positions [B, T] i32
  // on the host, called after next(m); unset for plain rows.
  std::function<Tensor(int64_t m)> positions;
  double denominator = 0;  // each micro-batch's summed loss is divided by it (Note [DDP averaging])
  float loss_scale = 1.0f;  // backward starts from the loss times this (fp16 loss scaling)
  // Called on this rank before micro-batch m's forward (point "forward") and its backward
  // ("backward"): fault injection and anomaly detection in tests and the Trainer.
  std::function<void(int64_t m, const char* point)> at;
};

// What forward_backward() saw: the step's summed loss (unscaled) and whether every micro-batch's
// loss was finite. The same on every rank of a data-parallel replica.
struct StepLoss {
  double sum = 0;
  bool finite = true;
};

struct ParallelStats {
  double exposed_comm_ms = 0;  // last step: time spent waiting for communication after backward
  int64_t bytes_reduced = 0;   // last step: gradient bytes this rank sent to reductions
  int64_t bytes_gathered = 0;  // last step: parameter bytes this rank gathered
  double bubble = -1;          // pipeline: the last step's idle fraction on this rank (< 0: none)
  // Offload (ZeRO with a file per rank): the last step's bytes read from and written to this
  // rank's file, and the time the file had a transfer in flight (0 without offload).
  int64_t offload_read_bytes = 0;
  int64_t offload_written_bytes = 0;
  double offload_busy_ms = 0;
};

}  // namespace braid::parallel
