// The CUDA DeviceBackend (core/device_backend.h), registered when the kernels library is
// linked, and the device seam of kernels/device.h for a build with CUDA.
#include <cuda_runtime_api.h>

#include "braid/core/device_backend.h"
#include "braid/core/error.h"
#include "braid/kernels/cuda/allocator.h"
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
};

CudaBackend g_backend;

// Registered at static initialisation. This file is always linked: check_cpu (every CPU
// kernel) calls unsupported_device, defined below.
const bool g_registered = [] {
  register_device_backend(DeviceType::cuda, &g_backend);
  return true;
}();

}  // namespace
}  // namespace cuda

void unsupported_device(Device device, const char* op) {
  (void)cuda::g_registered;
  BRAID_THROW("the CUDA backend has no kernel for ", op, " yet (tensor on ", device.str(), ")");
}

bool device_supported(DeviceType type) {
  (void)cuda::g_registered;
  return type == DeviceType::cpu || (type == DeviceType::cuda && cuda::available());
}

}  // namespace braid::kernels
