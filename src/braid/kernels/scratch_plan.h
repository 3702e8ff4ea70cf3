// ScratchPlan: the kernel scratch (Note [Kernel scratch], cpu/common.h) a sequence of kernel
// calls leaves one thread holding, worked out without running them. Each method makes the
// requests its kernel makes, slot by slot and in the kernel's order, and each slot grows by
// the kernels' own rule (scratch_grown): a slot never shrinks, so after a training step the
// slots' sizes summed are the tracker's scratch peak. Shapes use the kernels' letters (ops.h);
// `dtype` is the compute dtype (f32, bf16 or f16), parameter gradients are f32 (Note
// [Parameter gradients]). The GEMM library's own work memory is what the built library asks
// for (oneDNN: the primitive's scratchpad, queried for `threads`; OpenBLAS: the bf16 widening).
// parallel/estimate/scratch_estimate.h replays a training step through it; memory_estimate_test
// holds the result to the tracker.
#pragma once

#include <array>
#include <cstdint>

#include "braid/core/dtype.h"

namespace braid::kernels {

class ScratchPlan {
 public:
  explicit ScratchPlan(int threads);  // the OpenMP threads the kernels run with (>= 1)
  int threads() const { return threads_; }

  void linear_forward(int64_t N, int64_t C, int64_t OC, bool bias, DType dtype);
  // dinp, an f32 dweight, and dbias when `bias`
  void linear_backward(int64_t N, int64_t C, int64_t OC, bool bias, DType dtype);
  void bias_backward(int64_t C);
  void layernorm_forward(int64_t C);
  void rmsnorm_forward(int64_t C);
  void norm_backward(int64_t C);                 // either norm, with its parameters' gradients
  void rope(int64_t T, int64_t NH, int64_t HS);  // forward or backward: the same requests
  // Causal self-attention over T tokens, or Tq queries against Tk keys (either mask).
  void attention_forward(int64_t T, int64_t HS, DType dtype) { attention_forward(T, T, HS, dtype); }
  void attention_backward(int64_t T, int64_t HS, DType dtype) {
    attention_backward(T, T, HS, dtype);
  }
  void attention_forward(int64_t Tq, int64_t Tk, int64_t HS, DType dtype);
  void attention_backward(int64_t Tq, int64_t Tk, int64_t HS, DType dtype);
  void embedding_backward(int64_t C, bool positions);
  // One pass of the fused LM head and cross-entropy over N rows against V weight rows of
  // which `valid` are real (a vocabulary slice under tensor parallelism): the forward
  // (gradients = false) or the backward that recomputes the logits.
  void lm_head_ce(int64_t N, int64_t C, int64_t V, int64_t valid, bool gradients, DType dtype);
  void sum_squares(int64_t n);

  // C[M,N] = op(A) op(B) (+ beta C, + bias) in the GEMM library: its scratch (cpu/gemm.h).
  void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float beta, bool bias, DType dtype);
  // What scratch_raw(slot, bytes) / scratch_f64(slot, n) / a TeamScratch of `bytes` each ask.
  void take(int slot, int64_t bytes);
  void take_f64(int slot, int64_t n);
  void take_team(int slot, int64_t bytes);

  int64_t bytes() const;  // every slot's size, summed

 private:
  int threads_;
  std::array<int64_t, 14> size_{};  // scratch_raw's 10 slots, then scratch_f64's 4
};

}  // namespace braid::kernels
