#include "braid/core/device_backend.h"

#include <array>
#include <atomic>

#include "braid/core/error.h"

namespace braid {

namespace {

std::array<std::atomic<DeviceBackend*>, 2> g_backends{};
thread_local Device t_device = Device::cpu();

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
