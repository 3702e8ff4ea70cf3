// ScratchPlan (kernels/scratch_plan.h): each method is its kernel's scratch requests, in the
// kernel's order, with the kernel's slot numbers; the comment names the file they mirror.
#include "braid/kernels/scratch_plan.h"

#include <algorithm>
#include <numeric>

#include "braid/core/error.h"
#include "braid/kernels/cpu/attention_tiles.h"
#include "braid/kernels/cpu/common.h"
#include "braid/kernels/cpu/gemm.h"

namespace braid::kernels {

using cpu::kTile;
using cpu::round_up;

namespace {
constexpr int kRawSlots = 10;  // cpu/common.cpp: scratch_f64's slots follow scratch_raw's
constexpr int64_t kF = sizeof(float);
}  // namespace

ScratchPlan::ScratchPlan(int threads) : threads_(threads) {
  BRAID_CHECK(threads >= 1, "ScratchPlan: threads must be >= 1, got ", threads);
}

void ScratchPlan::take(int slot, int64_t bytes) {
  auto& s = size_.at(static_cast<size_t>(slot));
  s = static_cast<int64_t>(
      cpu::scratch_grown(static_cast<size_t>(s), static_cast<size_t>(std::max<int64_t>(bytes, 0))));
}

void ScratchPlan::take_f64(int slot, int64_t n) {
  take(kRawSlots + slot, std::max<int64_t>(n, 0) * static_cast<int64_t>(sizeof(double)));
}

void ScratchPlan::take_team(int slot, int64_t bytes) {
  take(slot, (bytes + 63) / 64 * 64 * threads_);  // TeamScratch: a 64-byte part per thread
}

int64_t ScratchPlan::bytes() const {
  return std::accumulate(size_.begin(), size_.end(), int64_t{0});
}

// cpu/gemm_f16.cpp: f16 operands widened into slots 8 and 9, then the f32 GEMM.
void ScratchPlan::gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float beta, bool bias,
                       DType dtype) {
  if (dtype == DType::f16) {
    take(8, M * K * kF);
    take(9, K * N * kF);
    dtype = DType::f32;
  }
  cpu::plan_gemm(*this, ta, tb, M, N, K, beta, bias, dtype);
}

// cpu/linear.cpp
void ScratchPlan::linear_forward(int64_t N, int64_t C, int64_t OC, bool bias, DType dtype) {
  if (dtype != DType::f32) {
    if (bias) take(1, OC * kF);
    take(0, N * OC * kF);
  }
  gemm(false, true, N, OC, C, 0.0f, bias, dtype);
}

void ScratchPlan::linear_backward(int64_t N, int64_t C, int64_t OC, bool bias, DType dtype) {
  if (dtype != DType::f32) take(0, N * C * kF);
  gemm(false, false, N, C, OC, dtype == DType::f32 ? 1.0f : 0.0f, false, dtype);
  gemm(true, false, OC, C, N, 1.0f, false, dtype);  // into the f32 dweight
  if (bias) bias_backward(OC);
}

// cpu/common.h add_column_sums (cpu/bias.cpp, linear.cpp)
void ScratchPlan::bias_backward(int64_t C) {
  take_f64(0, C);
}

// cpu/norm.cpp
void ScratchPlan::layernorm_forward(int64_t C) {
  take_team(0, 4 * C * kF);
}

void ScratchPlan::rmsnorm_forward(int64_t C) {
  take_team(0, 3 * C * kF);
}

void ScratchPlan::norm_backward(int64_t C) {
  take_f64(0, 2 * C * threads_);
  take_team(0, 6 * C * kF);
}

// cpu/rope.cpp: the cos/sin tables, then a row pair per thread
void ScratchPlan::rope(int64_t T, int64_t NH, int64_t HS) {
  const int64_t half = HS / 2;
  take(1, (2 * T * half + half) * kF);
  take_team(0, 2 * NH * HS * kF);
}

// cpu/attention.cpp: per-thread panels and tiles; bf16 on vdpbf16ps tiles when built for them.
void ScratchPlan::attention_forward(int64_t Tq, int64_t Tk, int64_t HS, DType dtype) {
  const int64_t Tqp = round_up(Tq, kTile), Tkp = round_up(Tk, kTile), HSp = round_up(HS, 16);
  const int64_t HW = HSp / 2, w = 4;
#ifdef __AVX512BF16__  // Note [bf16 attention tiles]
  if (dtype == DType::bf16) {
    take_team(0, Tqp * HW * w);
    take_team(1, HW * Tkp * w);
    take_team(2, Tkp / 2 * HSp * w);
    take_team(3, (kTile * kTile + kTile * HSp + 2 * kTile) * kF);
    take_team(4, kTile * kTile / 2 * w);
    return;
  }
#endif
  (void)dtype, (void)HW, (void)w;
  take_team(0, Tqp * HSp * kF);
  take_team(1, HSp * Tkp * kF);
  take_team(2, Tkp * HSp * kF);
  take_team(3, (kTile * kTile + kTile * HSp + 2 * kTile) * kF);
}

void ScratchPlan::attention_backward(int64_t Tq, int64_t Tk, int64_t HS, DType dtype) {
  const int64_t Tqp = round_up(Tq, kTile), Tkp = round_up(Tk, kTile), HSp = round_up(HS, 16);
  const int64_t q_panel = Tqp * (HSp / 2), k_panel = Tkp * (HSp / 2), w = 4;
#ifdef __AVX512BF16__
  if (dtype == DType::bf16) {
    take_team(0, 3 * k_panel * w);
    take_team(1, 4 * q_panel * w);
    take_team(2, (Tqp + 2 * kTile * kTile) * kF);
    take_team(3, (Tqp + 2 * Tkp) * HSp * kF);
    take_team(4, 3 * kTile * kTile / 2 * w);
    return;
  }
#endif
  (void)dtype, (void)q_panel, (void)k_panel, (void)w;
  take_team(0, Tkp * HSp * kF);
  take_team(1, HSp * Tkp * kF);
  take_team(2, HSp * Tkp * kF);
  take_team(3, (2 * Tqp * HSp + Tqp) * kF);
  take_team(4, (Tqp + 2 * Tkp) * HSp * kF);
  take_team(5, 2 * kTile * kTile * kF);
}

// cpu/embedding.cpp: the position table's gradient, a row per thread
void ScratchPlan::embedding_backward(int64_t C, bool positions) {
  if (positions) take_team(0, C * kF);
}

// cpu/cross_entropy.cpp ce_pass, chunks of 256 rows (bf16's weight gradient a GEMM a group of
// them, Note [Grouped weight gradient]); dweight is f32.
void ScratchPlan::lm_head_ce(int64_t N, int64_t C, int64_t V, int64_t valid, bool gradients,
                             DType dtype) {
  constexpr int64_t kChunk = cpu::kLmHeadChunk;
  const bool widen = dtype == DType::f16;
  const DType g = widen ? DType::f32 : dtype;
  take_f64(1, N);
  take(2, std::min(kChunk, N) * V * kF);
  if (widen) take(0, valid * C * kF);
  gradients = gradients && valid > 0;
  for (int64_t r0 = 0; r0 < N; r0 += kChunk) {
    const int64_t R = std::min(kChunk, N - r0);
    if (widen) take(1, R * C * kF);
    if (valid > 0) gemm(false, true, R, valid, C, 0.0f, false, g);
    if (!gradients) continue;
    const int64_t group = g == DType::bf16 ? cpu::lm_head_dw_group_rows(V) : kChunk;
    if (g == DType::bf16) take(4, std::min(group, N) * V * static_cast<int64_t>(sizeof(bf16)));
    if (dtype != DType::f32) take(5, R * C * kF);
    gemm(false, false, R, C, valid, dtype == DType::f32 ? 1.0f : 0.0f, false, g);
    if (const int64_t K = cpu::lm_head_group_done(r0, R, N, group); K > 0)
      gemm(true, false, valid, C, K, 1.0f, false, g);
  }
}

// cpu/elementwise.cpp: a partial sum per block of 2^14 elements
void ScratchPlan::sum_squares(int64_t n) {
  take_f64(0, (n + (1 << 14) - 1) >> 14);
}

}  // namespace braid::kernels
