// The device-group seam of comm (Note [Device groups]): how a run whose ranks each train on a
// device gets a process group that moves device memory itself (NCCL for CUDA), without comm's
// users linking that backend.
//
// Note [Device groups]: a backend for a device type (comm/nccl for cuda) registers a maker when
// a program links it (static registration, as the device kernels do: Note [Device kernels]).
// make_device_group(bootstrap, device, options) is collective over `bootstrap` (a host group:
// MPI, or threads): each rank names its own device, and the new group has the bootstrap's ranks
// and size, its operations on that device's memory (host tensors staged: Note [Device
// staging]). Where none is registered for the type it returns null and the caller keeps the host
// group, which stages device tensors through host memory instead: correct, not fast.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "braid/comm/process_group.h"

namespace braid::comm {

using DeviceGroupMaker = std::function<std::shared_ptr<ProcessGroup>(
    ProcessGroup& bootstrap, Device device, ProcessGroupOptions options)>;

// Registers (or with an empty maker, removes) the maker for `type`; `name` is the backend's
// ("nccl"), what parallel.comm_backend names.
void register_device_group(DeviceType type, std::string name, DeviceGroupMaker maker);
// The registered backend's name for `type`, "" where none is.
std::string device_group_backend(DeviceType type);
// Collective over `bootstrap`; null where no maker is registered for device.type.
std::shared_ptr<ProcessGroup> make_device_group(ProcessGroup& bootstrap, Device device,
                                                ProcessGroupOptions options);

}  // namespace braid::comm
