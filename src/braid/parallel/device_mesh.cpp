#include "braid/parallel/device_mesh.h"

#include <sstream>

#include "braid/core/error.h"

namespace braid::parallel {

DeviceMesh::DeviceMesh(std::shared_ptr<comm::ProcessGroup> world, Dims dims)
    : world_(std::move(world)), dims_(std::move(dims)) {
  BRAID_CHECK(world_, "DeviceMesh: no world group");
  BRAID_CHECK(!dims_.empty(), "DeviceMesh: no dimensions");
  int64_t product = 1;
  for (const auto& [name, n] : dims_) {
    BRAID_CHECK(n >= 1, "DeviceMesh: dimension '", name, "' has size ", n);
    int seen = 0;
    for (const auto& d : dims_) seen += d.first == name;
    BRAID_CHECK(seen == 1, "DeviceMesh: dimension '", name, "' appears ", seen, " times");
    product *= n;
  }
  BRAID_CHECK(product == world_->size(), "DeviceMesh ", str(), ": sizes multiply to ", product,
              " but the world has ", world_->size(), " ranks");
  // Row-major coordinates of this rank, last dimension fastest.
  coords_.assign(dims_.size(), 0);
  int r = world_->rank();
  for (int i = static_cast<int>(dims_.size()) - 1; i >= 0; --i) {
    coords_[i] = r % dims_[i].second;
    r /= dims_[i].second;
  }
  // Every rank creates the same groups in the same order (split is collective over the world).
  for (size_t i = 0; i < dims_.size(); ++i)
    groups_[dims_[i].first] = make_group({static_cast<int>(i)}, dims_[i].first);
  if (has("dp_replicate") && has("dp_shard") && !has("dp"))
    groups_["dp"] = make_group({index("dp_replicate"), index("dp_shard")}, "dp");
}

DeviceMesh DeviceMesh::strategy(std::shared_ptr<comm::ProcessGroup> world, int dp, int tp, int pp,
                                int dp_shard) {
  if (dp_shard <= 0) return DeviceMesh(std::move(world), {{"dp", dp}, {"pp", pp}, {"tp", tp}});
  BRAID_CHECK(dp % dp_shard == 0, "DeviceMesh: dp ", dp, " is not a multiple of dp_shard ",
              dp_shard);
  return DeviceMesh(
      std::move(world),
      {{"dp_replicate", dp / dp_shard}, {"dp_shard", dp_shard}, {"pp", pp}, {"tp", tp}});
}

std::shared_ptr<comm::ProcessGroup> DeviceMesh::make_group(const std::vector<int>& along,
                                                           const std::string& name) {
  // Color: the coordinates outside `along`, flattened; key: position within the group.
  int color = 0, key = 0;
  for (size_t i = 0; i < dims_.size(); ++i) {
    bool in = false;
    for (int a : along) in |= a == static_cast<int>(i);
    if (in)
      key = key * dims_[i].second + coords_[i];
    else
      color = color * dims_[i].second + coords_[i];
  }
  return world_->split(color, key, world_->name() + "/" + name);
}

std::shared_ptr<comm::ProcessGroup> DeviceMesh::group_along(const std::vector<std::string>& dims,
                                                            const std::string& name) {
  std::vector<int> along;
  for (const std::string& d : dims) along.push_back(index(d));
  return make_group(along, name);
}

bool DeviceMesh::has(const std::string& dim) const {
  for (const auto& d : dims_)
    if (d.first == dim) return true;
  return false;
}

int DeviceMesh::index(const std::string& dim) const {
  for (size_t i = 0; i < dims_.size(); ++i)
    if (dims_[i].first == dim) return static_cast<int>(i);
  std::ostringstream names;
  for (const auto& d : dims_) names << " " << d.first;
  BRAID_THROW("DeviceMesh: no dimension '", dim, "' (have:", names.str(), ")");
}

int DeviceMesh::size(const std::string& dim) const {
  if (dim == "dp" && !has("dp") && has("dp_shard")) return size("dp_replicate") * size("dp_shard");
  return dims_[index(dim)].second;
}

int DeviceMesh::coord(const std::string& dim) const {
  if (dim == "dp" && !has("dp") && has("dp_shard"))
    return coord("dp_replicate") * size("dp_shard") + coord("dp_shard");
  return coords_[index(dim)];
}

std::shared_ptr<comm::ProcessGroup> DeviceMesh::group_ptr(const std::string& dim) const {
  auto it = groups_.find(dim);
  if (it == groups_.end()) index(dim);  // throws naming the dimensions
  return it->second;
}

comm::ProcessGroup& DeviceMesh::group(const std::string& dim) const {
  return *group_ptr(dim);
}

int DeviceMesh::rank_of(const std::vector<int>& coords) const {
  BRAID_CHECK(coords.size() == dims_.size(), "DeviceMesh::rank_of: ", coords.size(),
              " coordinates for ", dims_.size(), " dimensions");
  int r = 0;
  for (size_t i = 0; i < dims_.size(); ++i) {
    BRAID_CHECK(coords[i] >= 0 && coords[i] < dims_[i].second,
                "DeviceMesh::rank_of: ", dims_[i].first, " coordinate ", coords[i], " outside [0, ",
                dims_[i].second, ")");
    r = r * dims_[i].second + coords[i];
  }
  return r;
}

std::string DeviceMesh::str() const {
  std::ostringstream os;
  for (size_t i = 0; i < dims_.size(); ++i)
    os << (i ? " x " : "") << dims_[i].first << "=" << dims_[i].second;
  if (!coords_.empty()) {
    os << ", rank " << world_->rank() << " at (";
    for (size_t i = 0; i < coords_.size(); ++i) os << (i ? ", " : "") << coords_[i];
    os << ")";
  }
  return os.str();
}

}  // namespace braid::parallel
