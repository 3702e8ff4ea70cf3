#include "braid/parallel/zero/zero_groups.h"

#include "braid/core/error.h"

namespace braid::parallel {

ZeroGroups ZeroGroups::make(const std::shared_ptr<comm::ProcessGroup>& world, int sharding_factor,
                            bool need_gather_stream) {
  BRAID_CHECK(world != nullptr, "sharded data parallel needs a process group");
  ZeroGroups g;
  g.n = world->size();
  g.s = sharding_factor > 0 ? sharding_factor : g.n;
  BRAID_CHECK(g.s <= g.n && g.n % g.s == 0, "parallel.sharding_factor ", g.s,
              " does not divide the data-parallel size ", g.n,
              " (each shard group holds sharding_factor ranks; the groups must tile the ranks)");
  g.r = g.n / g.s;
  if (g.r > 1) {
    DeviceMesh mesh(world, {{"dp_replicate", g.r}, {"dp_shard", g.s}});
    g.grad = mesh.group_ptr("dp");
    g.shard = mesh.group_ptr("dp_shard");
    g.replicate = mesh.group_ptr("dp_replicate");
  } else {
    DeviceMesh mesh(world, {{"dp", g.n}});
    g.grad = mesh.group_ptr("dp");
    g.shard = g.grad;
  }
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
