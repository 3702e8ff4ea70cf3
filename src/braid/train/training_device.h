// Where a run trains (training.device, Note [Training device]) and how its ranks communicate
// there (parallel.comm_backend, Note [Device groups] in comm/device_group.h).
#pragma once

#include <memory>

#include "braid/comm/process_group.h"
#include "braid/config/config.h"
#include "braid/core/device.h"

namespace braid::train {

// The rank's device for training.device (cuda: the local rank's index on its host); throws
// naming the key for what does not run on a device yet, and for parallel.comm_backend: nccl
// where no NCCL group is built in.
Device training_device(const config::TrainConfig& c);

// The group the parallel runtime runs over on `device`: the device's own (NCCL for cuda) made
// over `world` where parallel.comm_backend allows and one is built in, else null (keep `world`,
// which stages device tensors through host memory). Collective over `world`.
std::shared_ptr<comm::ProcessGroup> device_world(const config::TrainConfig& c, Device device,
                                                 comm::ProcessGroup* world);

}  // namespace braid::train
