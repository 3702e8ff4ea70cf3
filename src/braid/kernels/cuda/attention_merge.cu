// The merge of Note [Attention over key blocks] on the GPU (contract: kernels/ops.h; the CPU's in
// cpu/attention_merge.cpp, which checks the shapes before dispatching here): one thread per
// accumulator row (b, t, h), which updates its lse and then its HS outputs. expf / logf are the
// device's accurate ones, so the result is within an ulp or two of the CPU's, not its bits.
#include <cmath>

#include "braid/kernels/checks.h"
#include "braid/kernels/cuda/common.cuh"
#include "braid/kernels/cuda/cuda_ops.h"

namespace braid::kernels::cuda {

namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void attention_merge_kernel(float* acc, float* lacc, const T* out, const float* lse,
                                       int64_t B, int64_t rows, int64_t NH, int64_t HS, int64_t n,
                                       int64_t t0) {
  const int64_t total = B * n * NH;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t h = i % NH, t = (i / NH) % n, b = i / (NH * n);
    float& la = lacc[(b * NH + h) * rows + t0 + t];
    const float lb = lse[(b * NH + h) * n + t];
    const float m = fmaxf(la, lb);
    const float l = m + logf(expf(la - m) + expf(lb - m));
    const float wa = expf(la - l), wb = expf(lb - l);
    float* a = acc + ((b * rows + t0 + t) * NH + h) * HS;
    const T* p = out + ((b * n + t) * NH + h) * HS;
    for (int64_t x = 0; x < HS; ++x) a[x] = a[x] * wa + ld(p + x) * wb;
    la = l;
  }
}

}  // namespace

void attention_merge(Tensor& out_acc, Tensor& lse_acc, const Tensor& out, const Tensor& lse,
                     int64_t t0) {
  const char* op = "attention_merge";
  check_cuda(op, {&out_acc, &lse_acc, &out, &lse});
  const int64_t B = out_acc.size(0), rows = out_acc.size(1), NH = out_acc.size(2),
                HS = out_acc.size(3), n = out.size(1);
  if (B * n * NH == 0) return;
  dispatch_float(out.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    attention_merge_kernel<T><<<grid_for(B * n * NH, kThreads), kThreads, 0, stream()>>>(
        ptr<float>(out_acc), ptr<float>(lse_acc), ptr<T>(out), ptr<float>(lse), B, rows, NH, HS, n,
        t0);
    BRAID_CUDA_LAUNCHED(op);
  });
}

}  // namespace braid::kernels::cuda
