// The CUDA DeviceBackend (core/device_backend.h) and the CUDA kernels' table (Note [Device
// kernels], kernels/device_kernels.h), both registered at static initialisation when braid_cuda
// is linked in.
#include <cuda_runtime_api.h>

#include "braid/core/device_backend.h"
#include "braid/core/error.h"
#include "braid/kernels/cuda/allocator.h"
#include "braid/kernels/cuda/cuda_ops.h"
#include "braid/kernels/cuda/op_profile.h"
#include "braid/kernels/cuda/runtime.h"
#include "braid/kernels/device.h"

namespace braid::kernels {

namespace cuda {
namespace {

cudaMemcpyKind kind_of(Device dst, Device src) {
  if (dst.is_cpu()) return src.is_cpu() ? cudaMemcpyHostToHost : cudaMemcpyDeviceToHost;
  return src.is_cpu() ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice;
}

class CudaBackend final : public DeviceBackend {
 public:
  const char* name() const override { return "cuda"; }

  void* allocate(size_t nbytes, Device device) override {
    BRAID_CHECK(available(), "cannot allocate on ", device.str(),
                ": no CUDA device is visible (driver missing or CUDA_VISIBLE_DEVICES empty)");
    return device_allocate(nbytes, device.index);
  }

  void release(void* ptr, size_t, Device device) override { device_free(ptr, device.index); }

  void copy(void* dst, Device dst_device, const void* src, Device src_device,
            size_t nbytes) override {
    const Device on = dst_device.is_cpu() ? src_device : dst_device;
    set_device(on.index);
    cudaStream_t s = stream(on.index);
    BRAID_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind_of(dst_device, src_device), s),
                     "tensor copy");
    // The host may read (device-to-host) or free (host-to-device from pageable memory is
    // staged by the driver before returning, but a pinned source is not) right after.
    if (dst_device.is_cpu() || src_device.is_cpu()) {
      BRAID_CUDA_CHECK(cudaStreamSynchronize(s), "tensor copy");
    }
  }

  void zero(void* ptr, size_t nbytes, Device device) override {
    set_device(device.index);
    BRAID_CUDA_CHECK(cudaMemsetAsync(ptr, 0, nbytes, stream(device.index)), "zeroing a tensor");
  }

  void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n,
               Device device) override {
    set_device(device.index);
    cuda::convert(dst, dst_dtype, src, src_dtype, n);
  }

  void synchronize(Device device) override {
    set_device(device.index);
    BRAID_CUDA_CHECK(cudaStreamSynchronize(stream(device.index)), "synchronize");
  }

  void* queue(Device device) override { return stream(device.index); }

  // Note [Pinned host memory]: null (ordinary host memory instead) when CUDA cannot pin it.
  void* allocate_pinned(size_t nbytes) override {
    if (!available()) return nullptr;
    void* p = nullptr;
    if (cudaHostAlloc(&p, nbytes, cudaHostAllocDefault) != cudaSuccess) {
      cudaGetLastError();  // not sticky: clear it
      return nullptr;
    }
    return p;
  }
  void release_pinned(void* ptr) override { cudaFreeHost(ptr); }
};

CudaBackend g_backend;

void* op_begin(const char* op) {
  return new OpTimer(op);
}

void op_end(void* token) {
  delete static_cast<OpTimer*>(token);
}

DeviceKernels make_kernels() {
  DeviceKernels k;
  k.name = "CUDA";
  k.available = &available;
  if (profiling()) {  // BRAID_CUDA_PROFILE=1 (op_profile.h); otherwise no hook at all
    k.op_begin = &op_begin;
    k.op_end = &op_end;
  }
  k.matmul = &cuda::matmul;
  k.linear_forward = &cuda::linear_forward;
  k.linear_backward = &cuda::linear_backward;
  k.bias_add_forward = &cuda::bias_add_forward;
  k.bias_add_backward = &cuda::bias_add_backward;
  k.embedding_forward = &cuda::embedding_forward;
  k.embedding_backward = &cuda::embedding_backward;
  k.embedding_slice_forward = &cuda::embedding_slice_forward;
  k.embedding_slice_backward = &cuda::embedding_slice_backward;
  k.layernorm_forward = &cuda::layernorm_forward;
  k.layernorm_backward = &cuda::layernorm_backward;
  k.rmsnorm_forward = &cuda::rmsnorm_forward;
  k.rmsnorm_backward = &cuda::rmsnorm_backward;
  k.gelu_forward = &cuda::gelu_forward;
  k.gelu_backward = &cuda::gelu_backward;
  k.swiglu_forward = &cuda::swiglu_forward;
  k.swiglu_backward = &cuda::swiglu_backward;
  k.rope_forward = &cuda::rope_forward;
  k.rope_backward = &cuda::rope_backward;
  k.rope_forward_at = &cuda::rope_forward;
  k.rope_backward_at = &cuda::rope_backward;
  k.attention_forward = &cuda::attention_forward;
  k.attention_backward = &cuda::attention_backward;
  k.lm_head_ce_forward = &cuda::lm_head_ce_forward;
  k.lm_head_ce_backward = &cuda::lm_head_ce_backward;
  k.lm_head_ce_forward_backward = &cuda::lm_head_ce_forward_backward;
  k.lm_head_ce_partial_forward = &cuda::lm_head_ce_partial_forward;
  k.lm_head_ce_partial_backward = &cuda::lm_head_ce_partial_backward;
  k.lm_head_logits = &cuda::lm_head_logits;
  k.copy_columns = &cuda::copy_columns;
  k.set_columns = &cuda::set_columns;
  k.attention_merge = &cuda::attention_merge;
  k.add_columns = &cuda::add_columns;
  k.cast = &cuda::cast;
  k.add_forward = &cuda::add_forward;
  k.axpy = &cuda::axpy;
  k.scale = &cuda::scale;
  k.scale_list = &cuda::scale;
  k.sum_squares = &cuda::sum_squares;
  k.max_abs = &cuda::max_abs;
  k.sum_squares_fixed = &cuda::sum_squares_fixed;
  k.max_abs_list = &cuda::max_abs;
  k.sum_squares_fixed_list = &cuda::sum_squares_fixed;
  k.adamw_step = &cuda::adamw_step;
  k.adamw_step_list = &cuda::adamw_step;
  k.sgd_step = &cuda::sgd_step;
  return k;
}

const DeviceKernels g_kernels = make_kernels();

const bool g_registered = [] {
  register_device_backend(DeviceType::cuda, &g_backend);
  register_device_kernels(DeviceType::cuda, &g_kernels);
  return true;
}();

}  // namespace
}  // namespace cuda
}  // namespace braid::kernels
