#include "braid/parallel/zero/zero_groups.h"

#include "braid/core/error.h"

namespace braid::parallel {

ZeroGroups ZeroGroups::from_mesh(const DeviceMesh& mesh, bool need_gather_stream) {
  ZeroGroups g;
  g.grad = mesh.group_ptr("dp");
  g.shard = mesh.group_ptr("dp_shard_cp");
  g.n = mesh.size("dp");
  g.s = mesh.size("dp_shard_cp");
  g.r = mesh.size("dp_replicate");
  if (g.r > 1) g.replicate = mesh.group_ptr("dp_replicate");
  g.shard_pos = g.shard->rank();
  g.replica = g.replicate ? g.replicate->rank() : 0;
  BRAID_CHECK(g.grad->rank() == g.replica * g.s + g.shard_pos, "ZeroGroups: data-parallel rank ",
              g.grad->rank(), " is not replica ", g.replica, " x ", g.s, " + shard position ",
              g.shard_pos);
  if (need_gather_stream)
    g.gather = g.shard->split(0, g.shard->rank(), g.shard->name() + "/gather");
  return g;
}

}  // namespace braid::parallel
