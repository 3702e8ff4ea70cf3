// The device seam: kernels run on the CPU; a tensor on another device is routed here.
// Every op of ops.h passes BRAID_DEVICE_DISPATCH: when an argument is on a CUDA device and braid
// was built with BRAID_CUDA=ON the op runs as cuda::<op> (cuda/cuda_ops.h); on the simulated
// device (Note [Simulated device], core/device_backend.h) the CPU kernel runs on it; otherwise
// the CPU kernel's check_cpu throws "<backend> does not support <op>" (no_cuda.cpp) or, in a
// CUDA build, names the op the CUDA backend has no kernel for (cuda/backend.cpp).
#pragma once

#include <initializer_list>
#include <memory>

#include "braid/core/device.h"
#include "braid/core/device_backend.h"
#include "braid/core/tensor.h"

#if BRAID_CUDA
#include "braid/kernels/cuda/cuda_ops.h"
#include "braid/kernels/cuda/op_profile.h"
#endif

namespace braid::kernels {

// Throws braid::Error "<backend> does not support <op>" for a device braid cannot run op on.
[[noreturn]] void unsupported_device(Device device, const char* op);
// Whether kernels for this device type were compiled in (and, for CUDA, a device is visible).
bool device_supported(DeviceType type);

// Whether a device's memory is host memory (the simulated device, Note [Simulated device] in
// core/device_backend.h): the CPU kernels run on it.
inline bool simulated(Device d) {
  const DeviceBackend* b = d.is_cpu() ? nullptr : device_backend(d.type);
  return b && b->host_addressable();
}

// Whether any defined tensor among `tensors` lives on a real device (off the CPU, not simulated).
inline bool on_device(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t && t->defined() && !t->device().is_cpu() && !simulated(t->device())) return true;
  }
  return false;
}

// Lets the rest of a CPU kernel read and write its tensors that sit on the simulated device.
class SimulatedDeviceRoute {
 public:
  explicit SimulatedDeviceRoute(std::initializer_list<const Tensor*> tensors) {
    for (const Tensor* t : tensors) {
      if (t && t->defined() && simulated(t->device())) {
        scope_ = std::make_unique<HostKernelScope>();
        return;
      }
    }
  }

 private:
  std::unique_ptr<HostKernelScope> scope_;
};

}  // namespace braid::kernels

#if BRAID_CUDA
#define BRAID_DEVICE_DISPATCH(op, args, ...)              \
  if (::braid::kernels::on_device({__VA_ARGS__})) {       \
    ::braid::kernels::cuda::OpTimer braid_op_timer_(#op); \
    return ::braid::kernels::cuda::op args;               \
  }                                                       \
  ::braid::kernels::SimulatedDeviceRoute braid_simulated_route_({__VA_ARGS__})
#else
#define BRAID_DEVICE_DISPATCH(op, args, ...) \
  ::braid::kernels::SimulatedDeviceRoute braid_simulated_route_({__VA_ARGS__})
#endif
