// Public GEMM entry points on Tensors: matmul, and the measured GEMM peak for MFU reports.
//   c[M,N] = alpha * op(a) @ op(b) + beta * c; a is [M,K] ([K,M] when trans_a), b is [K,N]
//   ([N,K] when trans_b). bf16 and f16 tensors multiply into an f32 scratch, then round into c.
#include <omp.h>

#include <algorithm>
#include <chrono>

#include "braid/kernels/cpu/common.h"
#include "braid/kernels/cpu/gemm.h"
#include "braid/kernels/device.h"
#include "braid/kernels/ops.h"

namespace braid::kernels {

using namespace cpu;

void matmul(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha,
            float beta) {
  const char* op = "matmul";
  check_float(op, "a", a);
  check_same_dtype(op, "b", b, "a", a);
  check_same_dtype(op, "c", c, "a", a);
  BRAID_CHECK(a.dim() == 2 && b.dim() == 2 && c.dim() == 2, op, ": expected 2-D tensors, got a ",
              a.shape().str(), ", b ", b.shape().str(), ", c ", c.shape().str());
  int64_t M = trans_a ? a.size(1) : a.size(0), K = trans_a ? a.size(0) : a.size(1);
  int64_t Kb = trans_b ? b.size(1) : b.size(0), N = trans_b ? b.size(0) : b.size(1);
  BRAID_CHECK(K == Kb && c.size(0) == M && c.size(1) == N, op, ": shapes do not multiply: a ",
              a.shape().str(), (trans_a ? "^T" : ""), " @ b ", b.shape().str(),
              (trans_b ? "^T" : ""), " -> c ", c.shape().str());
  BRAID_DEVICE_DISPATCH(matmul, (c, a, b, trans_a, trans_b, alpha, beta), &c, &a, &b);
  check_cpu(op, {&c, &a, &b});
  dispatch_float(a.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) {
      gemm(trans_a, trans_b, M, N, K, alpha, a.data<float>(), a.size(1), b.data<float>(), b.size(1),
           beta, c.data<float>(), N);
    } else {
      float* tmp = scratch(0, M * N);
      gemm(trans_a, trans_b, M, N, K, alpha, a.data<T>(), a.size(1), b.data<T>(), b.size(1), 0.0f,
           tmp, N);
      write_back(c.data<T>(), tmp, M * N, beta);
    }
  });
}

double measure_gemm_peak_gflops(int n, DType dtype, Device device) {
  BRAID_CHECK(n > 0, "measure_gemm_peak_gflops: n must be positive, got ", n);
  BRAID_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16,
              "measure_gemm_peak_gflops: unsupported dtype ", dtype_name(dtype));
  DeviceScope on(device);
  // A device's work is queued: wait for it around each timed product.
  auto sync = [&] {
    if (!device.is_cpu()) require_device_backend(device).synchronize(device);
  };
  // Random operands: a GPU multiplies constant ones faster than real data (lower power draw), which
  // would overstate the peak MFU is measured against. Uniform ones: normal ones cost a log and a
  // cosine each, as long as the products themselves on a CPU.
  Rng rng(1);
  Tensor a = Tensor::uniform(Shape{n, n}, rng, -1.0f, 1.0f, dtype),
         b = Tensor::uniform(Shape{n, n}, rng, -1.0f, 1.0f, dtype);
  Tensor c = Tensor::zeros(Shape{n, n}, dtype);
  matmul(c, a, b, false, false);  // warm-up: primitive creation, page faults
  // Best of 3 on a CPU, where one product of a training-sized n takes a fifth of a second and
  // every `braid train` measures once; 5 on a device, where they take milliseconds.
  const int reps = device.is_cpu() ? 3 : 5;
  double flops = 2.0 * n * n * n, best = 0;
  for (int rep = 0; rep < reps; ++rep) {
    sync();
    auto t0 = std::chrono::steady_clock::now();
    matmul(c, a, b, false, false);
    sync();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, flops / s * 1e-9);
  }
  return best;
}

}  // namespace braid::kernels
