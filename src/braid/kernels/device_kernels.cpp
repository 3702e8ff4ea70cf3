// The registry of device kernels (Note [Device kernels], device_kernels.h) and the dispatch
// seam's errors (device.h).
#include "braid/kernels/device_kernels.h"

#include <atomic>

#include "braid/core/error.h"
#include "braid/kernels/device.h"

namespace braid::kernels {
namespace {

// Index 0 is the CPU's (never set): its kernels are the functions of ops.h themselves.
std::atomic<const DeviceKernels*> g_kernels[2];

size_t index_of(DeviceType type) {
  return type == DeviceType::cpu ? 0 : 1;
}

}  // namespace

void register_device_kernels(DeviceType type, const DeviceKernels* kernels) {
  BRAID_CHECK(type != DeviceType::cpu, "register_device_kernels: the CPU's are ops.h's own");
  g_kernels[index_of(type)].store(kernels, std::memory_order_release);
}

const DeviceKernels* device_kernels(DeviceType type) {
  return type == DeviceType::cpu ? nullptr
                                 : g_kernels[index_of(type)].load(std::memory_order_acquire);
}

std::optional<Device> list_device(const char* op, const std::vector<Tensor>& xs) {
  std::optional<Device> on;
  bool first = true;
  for (const Tensor& x : xs) {
    if (!x.defined()) continue;
    const std::optional<Device> here = real_device({&x});
    BRAID_CHECK(first || on == here, op, ": the tensors are on different devices");
    on = here;
    first = false;
  }
  return on;
}

void mixed_devices(const char* op, const Tensor& t, Device on) {
  BRAID_THROW(op, ": a tensor of shape ", t.shape().str(), " is on ", t.device().str(),
              " while the others are on ", on.str(), " (every argument must be on one device)");
}

void unsupported_device(Device device, const char* op) {
  const DeviceKernels* k = device_kernels(device.type);
  if (k)
    BRAID_THROW("the ", k->name, " backend has no kernel for ", op, " yet (tensor on ",
                device.str(), ")");
  const char* backend = device.type == DeviceType::cuda ? "cuda" : "unknown device";
  BRAID_THROW(backend, " does not support ", op, " (tensor on ", device.str(),
              "; this program has no ", backend,
              " backend: build with -DBRAID_CUDA=ON, which links braid_cuda into braid)");
}

bool device_supported(DeviceType type) {
  if (type == DeviceType::cpu) return true;
  const DeviceKernels* k = device_kernels(type);
  return k && (!k->available || k->available());
}

DeviceCall::DeviceCall(Device device, const char* op)
    : device_(device), op_(op), kernels_(device_kernels(device.type)) {
  if (!kernels_) unsupported_device(device, op);
  if (kernels_->op_begin) token_ = kernels_->op_begin(op);
}

DeviceCall::~DeviceCall() {
  if (kernels_->op_end) kernels_->op_end(token_);
}

}  // namespace braid::kernels
