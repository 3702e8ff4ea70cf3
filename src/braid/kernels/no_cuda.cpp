// Built when braid has no CUDA backend: every kernel asked to run on a CUDA tensor reports
// that the backend does not support it (STYLE.md: optional deps compile to stubs).
#include "braid/core/error.h"
#include "braid/kernels/device.h"

namespace braid::kernels {

void unsupported_device(Device device, const char* op) {
  const char* backend = device.type == DeviceType::cuda ? "cuda" : "unknown device";
  BRAID_THROW(backend, " does not support ", op, " (tensor on ", device.str(),
              "; braid was built without a CUDA backend)");
}

bool device_supported(DeviceType type) {
  return type == DeviceType::cpu;
}

}  // namespace braid::kernels
