// DeviceMesh: the world's ranks as an n-dimensional grid with named dimensions, built once per
// run (parallelize.h), and every process group the parallel runtime uses: one along each
// dimension and the flattened ones it names. Ranks are laid out row-major, the last dimension
// fastest. The training mesh is
//
//   dp_replicate x dp_shard x pp x cp x tp     (DeviceMesh::training)
//
// so tensor-parallel peers are adjacent ranks (same node first), then the context-parallel
// ring, then the stages of one pipeline, then the data-parallel ranks: the busiest traffic on
// the closest links. Data parallelism shards over dp_shard x cp and replicates over
// dp_replicate (HYBRID_SHARD: R x S; otherwise one of them is 1): "dp" is the flattened
// R x S x cp group its gradients are reduced over, ranked (r S + s) cp + c, "dp_shard_cp" the
// S x cp group it shards over, "batch" the R x S group the batches are split over (the cp ranks
// of one batch share it, Note [Context-parallel layout]) and "mp" the flattened pp x tp group
// of one data-parallel replica.
//
//   DeviceMesh mesh = DeviceMesh::training(world, {.dp_replicate = 1, .dp_shard = 2, .pp = 2,
//                                                  .tp = 2});
//   mesh.group("dp")   // my data-parallel peers: same pp and tp coordinates
//   mesh.coord("tp")   // my index along tp
//
// Note [Mesh groups]: a group is made once per distinct set of ranks. A set that is the whole
// world is the world group itself, a flattened set equal to one already made (dp when
// dp_replicate is 1, mp when tp is 1) is that group, and a one-rank group is a local group made
// on first use without communication. Every other group is a split of the world, made by the
// constructor (or flatten()) in the same order on every rank.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "braid/comm/process_group.h"

namespace braid::parallel {

struct MeshShape {
  int dp_replicate = 1;
  int dp_shard = 1;
  int pp = 1;
  int cp = 1;
  int tp = 1;
};

class DeviceMesh {
 public:
  using Dims = std::vector<std::pair<std::string, int>>;

  // The product of the sizes must equal world->size(). Collective over the world: it makes the
  // group along every dimension (Note [Mesh groups]).
  DeviceMesh(std::shared_ptr<comm::ProcessGroup> world, Dims dims);

  // dp_replicate x dp_shard x pp x cp x tp with the flattened "dp", "dp_shard_cp", "batch" and
  // "mp" groups. Collective.
  static DeviceMesh training(std::shared_ptr<comm::ProcessGroup> world, const MeshShape& shape);

  const Dims& dims() const { return dims_; }
  bool has(const std::string& dim) const;
  // A dimension's size or this rank's coordinate along it; a flattened group's name gives its
  // size and this rank's rank in it.
  int size(const std::string& dim) const;
  int coord(const std::string& dim) const;
  // The group of ranks that differ from this one only along dim (or a flattened group's name).
  comm::ProcessGroup& group(const std::string& dim) const;
  std::shared_ptr<comm::ProcessGroup> group_ptr(const std::string& dim) const;
  comm::ProcessGroup& world() const { return *world_; }
  const std::shared_ptr<comm::ProcessGroup>& world_ptr() const { return world_; }

  // Collective over the world: names the group of ranks that differ from this one only along
  // `dims` (e.g. {"pp", "tp"}: the model-parallel ranks of one data-parallel replica), ranked
  // row-major. group(name) then returns it.
  void flatten(const std::string& name, const std::vector<std::string>& dims);

  // World rank of the given coordinates (one per dimension, in order).
  int rank_of(const std::vector<int>& coords) const;
  std::string str() const;  // "dp_replicate=1 x dp_shard=2 x pp=2 x tp=2, rank 5 at (0, 1, 0, 1)"

 private:
  int index(const std::string& dim) const;  // throws naming the known dimensions
  // Note [Mesh groups]: the group along these dimension indices, made or reused.
  std::shared_ptr<comm::ProcessGroup> make_group(const std::vector<int>& along,
                                                 const std::string& name) const;

  std::shared_ptr<comm::ProcessGroup> world_;
  Dims dims_;
  std::vector<int> coords_;
  std::map<std::string, std::vector<int>> along_;  // every named group's dimensions
  // Groups by the dimensions of size > 1 they span (mutable: one-rank groups are made on use).
  mutable std::map<std::vector<int>, std::shared_ptr<comm::ProcessGroup>> made_;
};

}  // namespace braid::parallel
