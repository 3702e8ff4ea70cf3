// The process groups of a ZeroStrategy (Note [Shard geometry], zero_options.h), made from a
// DeviceMesh of the data-parallel ranks: dp_replicate x dp_shard for hybrid sharding, dp alone
// otherwise.
//   grad:      all N data-parallel ranks in world order: gradient reduce-scatters, the norm, and
//              the all-gather of updated pieces of whole (unsharded) units
//   shard:     the S ranks of this rank's shard group: parameter all-gathers
//   gather:    a twin of `shard` with its own queue for every parameter all-gather, so a
//              prefetching all-gather never waits behind a reduce-scatter (docs/design.md "Overlap
//              needs two queues"); stage 3 only
//   replicate: the R ranks holding the same shard (hybrid only, else null)
#pragma once

#include <memory>

#include "braid/comm/process_group.h"
#include "braid/parallel/device_mesh.h"

namespace braid::parallel {

struct ZeroGroups {
  std::shared_ptr<comm::ProcessGroup> grad;
  std::shared_ptr<comm::ProcessGroup> shard;
  std::shared_ptr<comm::ProcessGroup> gather;
  std::shared_ptr<comm::ProcessGroup> replicate;
  int n = 1, s = 1, r = 1;  // N, S, R
  int shard_pos = 0;        // s: position in the shard group
  int replica = 0;          // r: which replica group

  // Collective over world. sharding_factor must divide world->size() (0: all ranks).
  static ZeroGroups make(const std::shared_ptr<comm::ProcessGroup>& world, int sharding_factor,
                         bool need_gather_stream);
};

}  // namespace braid::parallel
