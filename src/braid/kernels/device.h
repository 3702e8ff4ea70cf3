// The device seam: kernels run on the CPU; a tensor on another device is routed here.
// Every op of ops.h passes BRAID_DEVICE_DISPATCH: when an argument is on a real device the op
// runs as that device's registered kernel (device_kernels.h, Note [Device kernels]: the CUDA
// backend's when braid_cuda is linked in); on the simulated device (Note [Simulated device],
// core/device_backend.h) the CPU kernel runs on it; a device without kernels, or without this
// op's, throws naming the op and the device (device_kernels.cpp). The CPU path is timed while
// profiling is on (op_profile.h, Note [Op profile]).
#pragma once

#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

#include "braid/core/device.h"
#include "braid/core/device_backend.h"
#include "braid/core/tensor.h"
#include "braid/kernels/device_kernels.h"
#include "braid/kernels/op_profile.h"

namespace braid::kernels {

// Throws braid::Error "<backend> does not support <op>" for a device braid cannot run op on.
[[noreturn]] void unsupported_device(Device device, const char* op);
// Whether kernels for this device type are linked in (and a device of it is visible).
bool device_supported(DeviceType type);

// Whether a device's memory is host memory (the simulated device, Note [Simulated device] in
// core/device_backend.h): the CPU kernels run on it.
inline bool simulated(Device d) {
  const DeviceBackend* b = d.is_cpu() ? nullptr : device_backend(d.type);
  return b && b->host_addressable();
}

// The device of the first defined tensor among `tensors` that lives on a real device (off the
// CPU, not simulated); none when all are on the CPU or the simulated device.
inline std::optional<Device> real_device(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t && t->defined() && !t->device().is_cpu() && !simulated(t->device())) return t->device();
  }
  return std::nullopt;
}
inline bool on_device(std::initializer_list<const Tensor*> tensors) {
  return real_device(tensors).has_value();
}
// The same for the list ops: the real device the defined tensors of xs are on; they must all
// be on one device (else throws naming op).
std::optional<Device> list_device(const char* op, const std::vector<Tensor>& xs);

// One dispatched call (BRAID_DEVICE_DISPATCH): finds the device's kernel for op, or throws
// naming both, and brackets the call with the backend's profiling hooks, if any (the object
// lives until the end of the call's full expression).
class DeviceCall {
 public:
  DeviceCall(Device device, const char* op);
  ~DeviceCall();
  DeviceCall(const DeviceCall&) = delete;
  DeviceCall& operator=(const DeviceCall&) = delete;

  template <typename Fn>
  Fn operator()(Fn DeviceKernels::*kernel) const {
    if (!(kernels_->*kernel)) unsupported_device(device_, op_);
    return kernels_->*kernel;
  }

 private:
  Device device_;
  const char* op_;
  const DeviceKernels* kernels_;
  void* token_ = nullptr;
};

// Throws as a real device's kernels do (cuda::check_cuda) when an op's tensors are not all on
// one device: `t` (on the host or another device) beside `on` (a device).
[[noreturn]] void mixed_devices(const char* op, const Tensor& t, Device on);

// Lets the rest of a CPU kernel read and write its tensors that sit on the simulated device.
// Like a real device's kernels, it refuses an op whose tensors are on the simulated device and
// elsewhere (the host, another index): so what would fail on a GPU fails on the simulated
// device too.
class SimulatedDeviceRoute {
 public:
  SimulatedDeviceRoute(const char* op, std::initializer_list<const Tensor*> tensors) {
    const Tensor* first = nullptr;
    for (const Tensor* t : tensors) {
      if (t && t->defined() && simulated(t->device())) {
        first = t;
        break;
      }
    }
    if (!first) return;
    for (const Tensor* t : tensors)
      if (t && t->defined() && t->device() != first->device())
        mixed_devices(op, *t, first->device());
    scope_ = std::make_unique<HostKernelScope>();
  }

 private:
  std::unique_ptr<HostKernelScope> scope_;
};

}  // namespace braid::kernels

#define BRAID_DEVICE_DISPATCH(op, args, ...)                                                       \
  if (const auto braid_device_ = ::braid::kernels::real_device({__VA_ARGS__}))                     \
    return ::braid::kernels::DeviceCall(*braid_device_, #op)(&::braid::kernels::DeviceKernels::op) \
        args;                                                                                      \
  ::braid::kernels::SimulatedDeviceRoute braid_simulated_route_(#op, {__VA_ARGS__});               \
  ::braid::kernels::OpScope braid_op_scope_(#op)
