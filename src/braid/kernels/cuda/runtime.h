// The CUDA runtime as braid's kernels use it (host side, usable from .cpp and .cu files):
// errors turned into braid::Error naming the op, one stream per device that every kernel,
// GEMM and copy is queued on (Note [Device backends], core/device_backend.h), the device's
// properties, argument checks, and scratch memory from the caching allocator.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <initializer_list>

#include "braid/core/tensor.h"

namespace braid::kernels::cuda {

// Throws braid::Error "<what>: <CUDA error name> (<message>) at <file>:<line>".
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line);
#define BRAID_CUDA_CHECK(expr, what)                                                       \
  do {                                                                                     \
    cudaError_t braid_cuda_err_ = (expr);                                                  \
    if (braid_cuda_err_ != cudaSuccess)                                                    \
      ::braid::kernels::cuda::throw_cuda_error(braid_cuda_err_, what, __FILE__, __LINE__); \
  } while (0)
// After a kernel launch: a bad launch configuration is reported here, naming the op.
#define BRAID_CUDA_LAUNCHED(op) BRAID_CUDA_CHECK(cudaGetLastError(), op)

// Whether a CUDA device is usable (the driver loads and at least one device is present).
bool available();
int device_count();
// Makes `index` the calling thread's current device (cudaSetDevice) when it is not already.
void set_device(int index);
// The stream braid's work on this device is queued on (created once, non-blocking).
cudaStream_t stream(int device_index);
cudaStream_t stream();  // of the current device
const cudaDeviceProp& properties(int device_index);
int current_device_index();

// Every defined tensor in `tensors` is on the same CUDA device; makes it current.
void check_cuda(const char* op, std::initializer_list<const Tensor*> tensors);

// Typed device pointer of a tensor (dtype checked).
template <typename T>
T* ptr(Tensor& t) {
  return static_cast<T*>(t.device_data());
}
template <typename T>
const T* ptr(const Tensor& t) {
  return static_cast<const T*>(t.device_data());
}

// Device scratch for one kernel call, from the caching allocator and charged to the calling
// thread's MemoryScope tracker as MemCategory::scratch. Freed when it goes out of scope; work
// already queued on the device's stream may still use it, which is safe because the next user
// of those bytes is queued on the same stream after it (stream-ordered reuse).
class Scratch {
 public:
  Scratch() = default;
  explicit Scratch(size_t nbytes);
  ~Scratch();
  Scratch(Scratch&& o) noexcept;
  Scratch& operator=(Scratch&& o) noexcept;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t nbytes() const { return nbytes_; }

 private:
  void reset();
  void* ptr_ = nullptr;
  size_t nbytes_ = 0;
  int device_ = 0;
  std::shared_ptr<MemoryTracker> tracker_;
};

// Whether kernels take their fused paths (the bias gradient in the weight-gradient GEMM,
// linear.cpp; the norms' backward in one pass, norm.cu): only with BRAID_CUDA_FUSION=1 (read
// once) for now. They were written and compiled in a session whose GPU was withdrawn before
// they ran, so they stay opt-in until the kernel tests (which run both paths) and a benchmark
// have run them on a card (docs/gpu.md, "Fused paths"); then they become the default.
bool fusion_enabled();
// Test hook: 0 follows the environment, 1 turns the fusions off, 2 on.
void set_fusion_for_testing(int mode);

// Copies n bytes device -> host on the current stream and waits for them.
void copy_to_host(void* dst, const void* src, size_t nbytes);

// Dtype conversion on the device (the backend's convert; elementwise.cu).
void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n);

// dbias[c] += sums[c] (f32 sums of dbias.numel() columns, in device memory): linear_backward's
// bias gradient when the weight-gradient GEMM took it (elementwise.cu).
void add_column_sums(Tensor& dbias, const float* sums);

}  // namespace braid::kernels::cuda
