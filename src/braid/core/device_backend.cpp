#include "braid/core/device_backend.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/tensor.h"

namespace braid {

namespace {

std::array<std::atomic<DeviceBackend*>, 2> g_backends{};
thread_local Device t_device = Device::cpu();
thread_local int t_host_kernel_depth = 0;

// Note [Simulated device]: host memory behind a device's name.
class SimulatedBackend final : public DeviceBackend {
 public:
  const char* name() const override { return "simulated"; }
  void* allocate(size_t nbytes, Device device) override {
    void* p = std::aligned_alloc(64, (std::max<size_t>(nbytes, 1) + 63) / 64 * 64);
    if (!p)
      throw OutOfMemory("out of (simulated " + device.str() + ") memory allocating " +
                        format_bytes(static_cast<int64_t>(nbytes)));
    return p;
  }
  void release(void* ptr, size_t, Device) override { std::free(ptr); }
  void copy(void* dst, Device, const void* src, Device, size_t nbytes) override {
    std::memmove(dst, src, nbytes);
  }
  void zero(void* ptr, size_t nbytes, Device) override { std::memset(ptr, 0, nbytes); }
  void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n,
               Device) override {
    std::vector<float> tmp(static_cast<size_t>(n));
    convert_to_f32(src, src_dtype, tmp.data(), n);
    convert_from_f32(tmp.data(), dst, dst_dtype, n);
  }
  void synchronize(Device) override {}
  bool host_addressable() const override { return true; }
  // Note [Pinned host memory]: ordinary aligned host memory stands in for the page-locked kind.
  void* allocate_pinned(size_t nbytes) override {
    return std::aligned_alloc(4096, (std::max<size_t>(nbytes, 1) + 4095) / 4096 * 4096);
  }
  void release_pinned(void* ptr) override { std::free(ptr); }
};

size_t index_of(DeviceType type) {
  return type == DeviceType::cpu ? 0 : 1;
}

}  // namespace

DeviceBackend* device_backend(DeviceType type) {
  return g_backends[index_of(type)].load(std::memory_order_acquire);
}

DeviceBackend& require_device_backend(Device device) {
  DeviceBackend* b = device.is_cpu() ? nullptr : device_backend(device.type);
  BRAID_CHECK(b, "device ", device.str(),
              " is not supported by this build (braid was built without a CUDA backend; "
              "configure with -DBRAID_CUDA=ON)");
  return *b;
}

void register_device_backend(DeviceType type, DeviceBackend* backend) {
  BRAID_CHECK(type != DeviceType::cpu, "register_device_backend: the CPU needs no backend");
  g_backends[index_of(type)].store(backend, std::memory_order_release);
}

DeviceBackend& simulated_device_backend() {
  static SimulatedBackend backend;
  return backend;
}

bool register_simulated_device(DeviceType type) {
  DeviceBackend* now = device_backend(type);
  if (now && !now->host_addressable()) return false;  // a real backend is there
  register_device_backend(type, &simulated_device_backend());
  return true;
}

HostKernelScope::HostKernelScope() {
  ++t_host_kernel_depth;
}

HostKernelScope::~HostKernelScope() {
  --t_host_kernel_depth;
}

bool HostKernelScope::active() {
  return t_host_kernel_depth > 0;
}

Device current_device() {
  return t_device;
}

DeviceScope::DeviceScope(Device device) : prev_(t_device) {
  if (!device.is_cpu()) require_device_backend(device);
  t_device = device;
}

DeviceScope::~DeviceScope() {
  t_device = prev_;
}

}  // namespace braid
