// A device group for the simulated device (Note [Simulated device], Note [Device groups]): what
// NCCL is to a GPU, for tests on any machine. Registered for DeviceType::cuda as backend
// "simulated", it makes, over a host bootstrap group, a group whose home is the rank's
// (simulated) device: host tensors given to it are staged onto the device by the base class
// (Note [Device staging]), and a tensor that reaches the backend elsewhere than on that device
// fails the operation, naming it, as NcclGroup's do. The backend itself runs each operation on
// a host group split from the bootstrap, which stages the device tensors back through host
// memory: so the data moved is exact, and what is tested is that everything above the group
// (the trainer, every strategy) hands a device group what it can take.
#pragma once

#include <cstdint>

namespace braid::testing {

void register_simulated_device_group();
void unregister_simulated_device_group();
// Groups made and operations (collectives and sends/recvs) they ran since the process began.
int64_t simulated_device_groups_made();
int64_t simulated_device_group_ops();

}  // namespace braid::testing
