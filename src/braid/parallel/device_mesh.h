// DeviceMesh: the world's ranks as an n-dimensional grid with named dimensions, and the process
// group along each dimension. Ranks are laid out row-major, the last dimension fastest, so with
// {"dp", "pp", "tp"} tensor-parallel peers are adjacent ranks (same node first), then the stages
// of one pipeline, then the data-parallel replicas: the busiest traffic on the closest links.
//
//   DeviceMesh mesh(world, {{"pp", 2}, {"dp", 2}, {"tp", 2}});
//   mesh.group("dp")   // my data-parallel peers: same pp and tp coordinates
//   mesh.coord("tp")   // my index along tp
//
// HYBRID_SHARD: give dp as two dimensions, {"dp_replicate", R}, {"dp_shard", S}: parameters are
// sharded over group("dp_shard") (ranks that are adjacent) and replicated over
// group("dp_replicate"); group("dp") is then the flattened R x S group. DeviceMesh::strategy
// builds that layout from plain sizes.
//
// Creating a mesh is collective over the world group (it splits it once per group, in the same
// order on every rank).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "braid/comm/process_group.h"

namespace braid::parallel {

class DeviceMesh {
 public:
  using Dims = std::vector<std::pair<std::string, int>>;

  // The product of the sizes must equal world->size().
  DeviceMesh(std::shared_ptr<comm::ProcessGroup> world, Dims dims);

  // dp x pp x tp, with dp split into replicate x shard when dp_shard > 0 (HYBRID_SHARD).
  static DeviceMesh strategy(std::shared_ptr<comm::ProcessGroup> world, int dp, int tp = 1,
                             int pp = 1, int dp_shard = 0);

  const Dims& dims() const { return dims_; }
  bool has(const std::string& dim) const;
  int size(const std::string& dim) const;
  int coord(const std::string& dim) const;  // this rank's index along dim
  // The group of ranks that differ from this one only along dim ("dp" also names the flattened
  // dp_replicate x dp_shard group when those exist).
  comm::ProcessGroup& group(const std::string& dim) const;
  std::shared_ptr<comm::ProcessGroup> group_ptr(const std::string& dim) const;
  comm::ProcessGroup& world() const { return *world_; }

  // Collective over the world: the group of ranks that differ from this one only along `dims`
  // (e.g. {"pp", "tp"}: the model-parallel ranks of one data-parallel replica), ranked row-major.
  std::shared_ptr<comm::ProcessGroup> group_along(const std::vector<std::string>& dims,
                                                  const std::string& name);

  // World rank of the given coordinates (one per dimension, in order).
  int rank_of(const std::vector<int>& coords) const;
  std::string str() const;  // "pp=2 x dp=2 x tp=2, rank 5 at (1, 0, 1)"

 private:
  int index(const std::string& dim) const;  // throws naming the known dimensions
  std::shared_ptr<comm::ProcessGroup> make_group(const std::vector<int>& along,
                                                 const std::string& name);

  std::shared_ptr<comm::ProcessGroup> world_;
  Dims dims_;
  std::vector<int> coords_;
  std::map<std::string, std::shared_ptr<comm::ProcessGroup>> groups_;
};

}  // namespace braid::parallel
