// One launch for an op over a list of tensors (Note [Multi-tensor launches]); .cu files only.
//
// Note [Multi-tensor launches]:
// - Clipping reduces and scales every gradient, and the optimizer steps every parameter: about
//   150 tensors for GPT-2 124M, most of them biases and norm weights of a few hundred elements.
//   A launch per tensor costs the host 5-8 us (checks, dispatch, the launch itself), more than
//   the GPU spends on a small tensor, so such a list op was bound by issuing launches (H100:
//   1.1 ms a step for the clip's sum of squares, whose kernels read 0.5 GB).
// - A list op instead launches once per kMaxSegments tensors. The launch's table of segments
//   (pointer, element count, dtype, its first block and block count) is the kernel's
//   __grid_constant__ parameter: no copy to the device, no synchronisation, and a block indexes
//   it where it lies. Each block finds its segment by a binary search over the first blocks and
//   runs the per-tensor kernel's loop over that tensor alone.
// - Each tensor gets the blocks a launch of its own would have had. The reductions (a max, an
//   exact integer sum) do not depend on how the elements are split or in what order the
//   partials are combined, so one more block finishes them on the device and one value is
//   copied back: the one-by-one results bit for bit, with one round trip.
#pragma once

#include <vector>

#include "braid/core/tensor.h"
#include "braid/kernels/checks.h"
#include "braid/kernels/cuda/common.cuh"
#include "braid/kernels/cuda/cuda_ops.h"

namespace braid::kernels::cuda {

// 96 segments of 32 bytes: 3 KiB, within the 4 KiB every CUDA version allows for parameters.
constexpr int kMaxSegments = 96;

struct Segment {
  void* data;
  int64_t n;
  int first_block;  // within its launch
  int blocks;
  int dtype;  // static_cast<int>(DType): f32, bf16 or f16
};

struct SegmentBatch {
  int count;
  Segment seg[kMaxSegments];
};

// One launch: its table, its grid, and where its blocks start among all the list's blocks (the
// offset of its partials).
struct SegmentLaunch {
  SegmentBatch batch{};
  int blocks = 0;
  int64_t first_block = 0;
};

// The launches for xs (undefined and empty tensors skipped), each tensor given
// grid_for(numel, threads, cap) blocks; *total the blocks of all launches. Checks each tensor is
// a float tensor on the device, with op's messages.
inline std::vector<SegmentLaunch> segment_launches(const char* op, const std::vector<Tensor>& xs,
                                                   int threads, int64_t cap, int64_t* total) {
  std::vector<SegmentLaunch> out;
  *total = 0;
  for (const Tensor& x : xs) {
    if (!x.defined() || x.numel() == 0) continue;
    check_cuda(op, {&x});
    check_float(op, "x", x);
    if (out.empty() || out.back().batch.count == kMaxSegments) {
      out.emplace_back();
      out.back().first_block = *total;
    }
    SegmentLaunch& l = out.back();
    const int blocks = static_cast<int>(grid_for(x.numel(), threads, cap));
    l.batch.seg[l.batch.count++] = Segment{const_cast<void*>(x.device_data()), x.numel(), l.blocks,
                                           blocks, static_cast<int>(x.dtype())};
    l.blocks += blocks;
    *total += blocks;
  }
  return out;
}

// The segment block `block` of the launch works on (Batch: a count and a seg[] array whose
// entries have first_block).
template <typename Batch>
__device__ __forceinline__ const auto& segment_of(const Batch& b, int block) {
  int lo = 0, hi = b.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (b.seg[mid].first_block <= block) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return b.seg[lo];
}

// The calling thread's first element of its block's segment, and the stride between its
// elements (the segment's blocks, grid-stride): a launch of its own's indices.
template <typename Seg>
__device__ __forceinline__ int64_t segment_first(const Seg& s) {
  return static_cast<int64_t>(blockIdx.x - s.first_block) * blockDim.x + threadIdx.x;
}
template <typename Seg>
__device__ __forceinline__ int64_t segment_stride(const Seg& s) {
  return static_cast<int64_t>(s.blocks) * blockDim.x;
}

// fn(T{}) with T float, bf16_t or f16_t for dtype (static_cast<int>(DType)).
template <typename Fn>
__device__ __forceinline__ void with_float_type(int dtype, Fn&& fn) {
  switch (dtype) {
    case static_cast<int>(DType::f32):
      fn(float{});
      break;
    case static_cast<int>(DType::bf16):
      fn(bf16_t{});
      break;
    default:
      fn(f16_t{});
      break;
  }
}

}  // namespace braid::kernels::cuda
