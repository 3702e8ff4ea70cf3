// ZeroRuntime's gradient reductions (zero_runtime.h): launching each unit's reduce-scatter once
// its gradients are ready, folding the reduced piece into the optimizer's shard (in memory or
// offloaded), and polling them to completion.
#include <atomic>
#include <cmath>
#include <optional>

#include "braid/core/error.h"
#include "braid/kernels/ops.h"
#include "braid/optim/clip_grad.h"
#include "braid/parallel/zero/sharded_data_parallel.h"
#include "braid/parallel/zero/zero_runtime.h"

namespace braid::parallel {

void ZeroRuntime::launch_ready_reductions() {
  while (next_reduce_ >= 0) {
    ZeroUnit& u = units_[static_cast<size_t>(next_reduce_)];
    if (u.trainable > 0 && !u.ready) return;
    if (u.trainable > 0 && reducing_) {
      // Every trainable gradient must have landed in the unit's buffer (bound in backward pre).
      for (int p : layout_.units()[static_cast<size_t>(u.index)].params) {
        const auto& var = layout_.params()[static_cast<size_t>(p)].param->var;
        BRAID_CHECK(!var.requires_grad() || var.grad().shares_storage(u.grads), opt_.label,
                    ": the gradient of '", var.name(),
                    "' did not land in its unit's buffer (its module's backward hook did not run "
                    "before it)");
      }
      Tensor grads = u.grads;
      if (opt_.reduce_dtype != grads.dtype()) {  // Note [Reduce dtype]
        u.reduce_stage =
            Tensor::empty(Shape{u.geo.padded}, opt_.reduce_dtype, MemCategory::communication);
        kernels::cast(u.reduce_stage, grads);
        grads = u.reduce_stage;
      }
      Tensor chunk = grads.flat_range(u.geo.piece_begin(c()), u.geo.piece);
      pending_.push_back({u.index, groups_.grad->reduce_scatter(chunk, grads)});
      stats_.bytes_reduced += u.geo.padded * static_cast<int64_t>(dtype_size(grads.dtype()));
    }
    --next_reduce_;
  }
}

void ZeroRuntime::finish_grad_write() {
  if (!grad_write_) return;
  grad_write_->wait();
  grad_write_ = nullptr;
  grad_stage_ = Tensor();
}

namespace {
std::atomic<int> norm_sums_for_testing{-1};

int norm_sums_to_take() {
  const int n = norm_sums_for_testing.load(std::memory_order_relaxed);
  return n < 0 ? ZeroUnit::kNormSums : std::min(n, ZeroUnit::kNormSums);
}
}  // namespace

void set_offloaded_norm_sums_for_testing(int count) {
  norm_sums_for_testing.store(count, std::memory_order_relaxed);
}

// Note [Offloaded gradients]: with the optimizer offloaded (stages 2 and 3) the reduced piece of
// each unit goes to its region of the file as soon as it is reduced, with its max |g| noted for
// the norm; the norm reads the pieces back once (the exact sum needs the global max first), and
// clipping scales each piece when the optimizer reads it back, by the same factor in the same
// float multiply as the in-memory path. One write is in flight at a time.
void ZeroRuntime::fold_offloaded(ZeroUnit& u, const Tensor& chunk) {
  run_deferred(u);  // its update reads the last step's gradient (Note [Deferred step])
  finish_grad_write();
  Tensor stage = io_buffer(u.geo.piece, DType::f32, MemCategory::gradients);
  if (u.reductions == 0) {
    stage.copy_(chunk);
  } else {
    offload_->read(u.grad_region, stage)->wait();
    // A chunk reduced on a device comes to the host first (Note [Offload on a device]).
    const Tensor host = chunk.device().is_cpu() ? chunk : chunk.to(Device::cpu());
    kernels::axpy(stage, host, 1.0f);  // micro-steps summed in order
  }
  u.grad_max = kernels::max_abs(stage);
  // Note [Offloaded norm]: taken in the last micro-step only, whose folds leave the piece final
  // (an earlier micro-step's piece is summed into again).
  u.norm_sums_valid =
      micro_step_ + 1 == accumulation_steps_ && u.grad_max > 0 && std::isfinite(u.grad_max);
  if (u.norm_sums_valid) {
    // From the largest max written so far this micro-step: a bound on the global max from below.
    written_max_ = std::max(written_max_, u.grad_max);
    u.norm_shift = optim::exact_norm_shift(written_max_);
    u.norm_sums_taken = norm_sums_to_take();
    int shifts[ZeroUnit::kNormSums];
    for (int k = 0; k < u.norm_sums_taken; ++k) shifts[k] = u.norm_shift - 2 * k;
    kernels::sum_squares_fixed(stage, shifts, u.norm_sums_taken, u.norm_sums);
  }
  grad_write_ = offload_->write(u.grad_region, stage);
  grad_stage_ = stage;
}

// Note [Offloaded norm]: the exact norm (Note [Exact norm]) sums floor(g^2 2^shift) with the
// shift of the global max |g|, known only once every piece is reduced; an offloaded piece is in
// memory only while it is written. So as each piece is written its sums are taken, in one pass
// over it, at the shifts of a global max from M up to 8 times M (shift, shift - 2, ...: one per
// power of two), M the largest max of the pieces this rank has written in the micro-step so far,
// its own included (a bound on the global max from below; the LM head's, with the largest
// gradients, is reduced first); the norm uses the sum that matches and reads back only the
// pieces whose sums do not reach the global max, where the gradients of a step were read back
// whole before. The same integers, so the same norm bit for bit. From each piece's own max
// instead of M, the 3B LLaMA of configs/llama-3b-offload.yaml in bf16 read 28.9 GB a step, its
// file and 18% more; now 24.4 GB, the file. The sums of GPT-2 large's pieces (bench/offload.sh)
// take 304 ms a step, 686 ms as four passes.
std::optional<__int128> ZeroRuntime::offloaded_norm_sum(const ZeroUnit& u, int shift) {
  if (u.grad_max == 0) return __int128{0};
  if (!u.norm_sums_valid) return std::nullopt;
  const int k = (u.norm_shift - shift) / 2;
  if ((u.norm_shift - shift) % 2 != 0 || k < 0 || k >= u.norm_sums_taken) return std::nullopt;
  return u.norm_sums[k];
}

void ZeroRuntime::fold(ZeroUnit& u) {
  const Tensor& reduced = u.reduce_stage.defined() ? u.reduce_stage : u.grads;
  const Tensor chunk = reduced.flat_range(u.geo.piece_begin(c()), u.geo.piece);
  if (u.grad_region >= 0) {
    fold_offloaded(u, chunk);
  } else if (opt_.stage == 1 && !opt_.sync_each_batch) {
    // grad_piece is this very chunk of the full gradient buffer (cast back from the reduce
    // dtype when there is one).
    if (u.reduce_stage.defined()) kernels::cast(u.grad_piece, chunk);
  } else if (u.reductions == 0) {
    u.grad_piece.copy_(chunk);
  } else {
    kernels::axpy(u.grad_piece, chunk, 1.0f);  // micro-steps summed in order
  }
  ++u.reductions;
  u.reduce_stage = Tensor();
}

void ZeroRuntime::poll_reductions(bool wait_all) {
  while (!pending_.empty()) {
    Pending& p = pending_.front();
    if (!wait_all && !p.work->is_completed()) return;
    p.work->wait();
    ZeroUnit& u = units_[static_cast<size_t>(p.unit)];
    fold(u);
    pending_.pop_front();  // its work may refer to u.grads
    if (opt_.stage >= 2) {
      bind_grads(u, Tensor());
      recycled_.give(std::move(u.grads));
    }
  }
}

}  // namespace braid::parallel
