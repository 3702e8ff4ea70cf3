// The device seam of core (Note [Device backends]): how Storage gets bytes on a device other
// than the CPU and how Tensor moves them. A backend (kernels/cuda) registers itself for its
// DeviceType; core never includes it. Without one, a tensor on that device cannot be made.
//
// Note [Device backends]:
// - Storage on a non-CPU device asks the backend for memory (a caching allocator) and gives it
//   back on destruction; the MemoryTracker is charged the same categories as on the CPU.
// - Work on a device is ordered on the backend's current stream. copy() returns when the bytes
//   are usable by the host (device-to-host copies synchronise); zero() and device-to-device
//   copies are only enqueued.
// - Host code never dereferences device memory: Tensor::raw_data() on a device tensor throws,
//   naming the device; kernels take device_data().
// - DeviceScope sets the thread's default device: Tensor::empty without a device allocates
//   there, so a model built and run under DeviceScope{cuda} lives on the GPU (as PyTorch's
//   torch.set_default_device). Tensors that hold host-side data (token ids a loader fills)
//   name Device::cpu() and are copied over with Tensor::to(Device).
#pragma once

#include <cstddef>
#include <cstdint>

#include "braid/core/device.h"
#include "braid/core/dtype.h"

namespace braid {

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual const char* name() const = 0;
  // nbytes on `device`, or throws OutOfMemory naming the bytes asked and the device's state.
  virtual void* allocate(size_t nbytes, Device device) = 0;
  virtual void release(void* ptr, size_t nbytes, Device device) = 0;
  // nbytes from src (on src_device) to dst (on dst_device); either may be the CPU.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device,
                    size_t nbytes) = 0;
  virtual void zero(void* ptr, size_t nbytes, Device device) = 0;
  // dst[i] = src[i] converted (f32, bf16, f16 each way, rounding as core/dtype.h), both on device.
  virtual void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n,
                       Device device) = 0;
  // Waits until the device's queued work is done.
  virtual void synchronize(Device device) = 0;
  // Note [Pinned host memory]: host memory page-locked for the device's copies (CUDA's
  // cudaHostAlloc: copies to and from it run at the bus's speed, without the driver's staging),
  // aligned to 4096 bytes; null where the backend has none. release_pinned gives it back.
  virtual void* allocate_pinned(size_t /*nbytes*/) { return nullptr; }
  virtual void release_pinned(void* /*ptr*/) {}
  // The queue the backend orders the device's work on, as the runtime's handle (CUDA: the
  // cudaStream_t), for libraries that order their own queues against it (NCCL: Note [NCCL
  // streams]); null where there is none to name.
  virtual void* queue(Device) { return nullptr; }
  // Whether the device's memory is host memory in disguise (the simulated device, Note
  // [Simulated device]): the CPU kernels then run on it, inside a HostKernelScope.
  virtual bool host_addressable() const { return false; }
};

// The backend registered for `type` (null for the CPU and for types with none registered).
DeviceBackend* device_backend(DeviceType type);
// Throws "no <type> backend in this build" when none is registered.
DeviceBackend& require_device_backend(Device device);
void register_device_backend(DeviceType type, DeviceBackend* backend);

// The thread's default device for Tensor::empty (Device::cpu() unless a scope is active).
Device current_device();

// Note [Simulated device]: a DeviceBackend whose "device" memory is host memory, registered in
// place of CUDA by tests (register_simulated_device) in builds without a real backend. Tensors on
// it are device tensors to everything above the kernels: host code that reads or writes them
// outside a kernel throws, as on a GPU, while the kernels (which enter a HostKernelScope) run
// their CPU code on them. So the device paths of the trainer, the strategies, checkpoints and
// communication are exercised on any machine, bit for bit equal to the CPU run.
DeviceBackend& simulated_device_backend();
// Registers the simulated backend for `type` (tests); false when a real one is registered.
bool register_simulated_device(DeviceType type = DeviceType::cuda);

// While one is alive on this thread, tensors on a host-addressable device may be read and
// written as host memory (the kernels' bodies).
class HostKernelScope {
 public:
  HostKernelScope();
  ~HostKernelScope();
  HostKernelScope(const HostKernelScope&) = delete;
  HostKernelScope& operator=(const HostKernelScope&) = delete;
  static bool active();
};

class DeviceScope {
 public:
  explicit DeviceScope(Device device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  Device prev_;
};

}  // namespace braid
