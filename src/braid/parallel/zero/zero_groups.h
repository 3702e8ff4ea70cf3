// The process groups of a ShardedDataParallel (Note [Shard geometry], zero_options.h), taken from
// the one DeviceMesh (device_mesh.h): its dp_replicate x dp_shard dimensions.
//   grad:      all N data-parallel ranks in mesh order: gradient reduce-scatters, the norm, and
//              the all-gather of updated pieces of whole (unsharded) units (the mesh's "dp")
//   shard:     the S ranks of this rank's shard group: parameter all-gathers ("dp_shard")
//   gather:    a twin of `shard` with its own queue for every parameter all-gather, so a
//              prefetching all-gather never waits behind a reduce-scatter (docs/design.md
//              "Overlap needs two queues"); stage 3 only
//   replicate: the R ranks holding the same shard ("dp_replicate"; hybrid only, else null)
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

  // Collective over the mesh's world when need_gather_stream (it splits the gather twin).
  static ZeroGroups from_mesh(const DeviceMesh& mesh, bool need_gather_stream);
};

}  // namespace braid::parallel
