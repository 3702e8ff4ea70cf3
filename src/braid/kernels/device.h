// The device seam: kernels run on the CPU; a tensor on another device is routed here, and a
// backend that is not built (CUDA today, see no_cuda.cpp) throws
// "<backend> does not support <op>". A CUDA build swaps no_cuda.cpp for cuda/ dispatch.
#pragma once

#include "braid/core/device.h"

namespace braid::kernels {

// Throws braid::Error "<backend> does not support <op>" for a device braid cannot run op on.
[[noreturn]] void unsupported_device(Device device, const char* op);
// Whether kernels for this device type were compiled in.
bool device_supported(DeviceType type);

}  // namespace braid::kernels
