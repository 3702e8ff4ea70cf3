#include "braid/parallel/device_mesh.h"

#include <algorithm>
#include <sstream>

#include "braid/comm/local/local_group.h"
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
  for (size_t i = 0; i < dims_.size(); ++i) {
    along_[dims_[i].first] = {static_cast<int>(i)};
    if (dims_[i].second > 1) make_group({static_cast<int>(i)}, dims_[i].first);
  }
}

DeviceMesh DeviceMesh::training(std::shared_ptr<comm::ProcessGroup> world, const MeshShape& s) {
  DeviceMesh mesh(std::move(world), {{"dp_replicate", s.dp_replicate},
                                     {"dp_shard", s.dp_shard},
                                     {"pp", s.pp},
                                     {"cp", s.cp},
                                     {"tp", s.tp}});
  mesh.flatten("dp", {"dp_replicate", "dp_shard", "cp"});
  mesh.flatten("dp_shard_cp", {"dp_shard", "cp"});
  mesh.flatten("batch", {"dp_replicate", "dp_shard"});
  mesh.flatten("mp", {"pp", "tp"});
  return mesh;
}

void DeviceMesh::flatten(const std::string& name, const std::vector<std::string>& dims) {
  BRAID_CHECK(!along_.count(name), "DeviceMesh: a group named '", name, "' exists already");
  std::vector<int> along;
  for (const std::string& d : dims) along.push_back(index(d));
  std::sort(along.begin(), along.end());  // ranked row-major in mesh order
  along_[name] = along;
  if (size(name) > 1) make_group(along, name);
}

std::shared_ptr<comm::ProcessGroup> DeviceMesh::make_group(const std::vector<int>& along,
                                                           const std::string& name) const {
  std::vector<int> key;  // the dimensions that matter: size > 1, in mesh order
  int64_t ranks = 1;
  for (size_t i = 0; i < dims_.size(); ++i) {
    bool in = false;
    for (int a : along) in |= a == static_cast<int>(i);
    if (in && dims_[i].second > 1) {
      key.push_back(static_cast<int>(i));
      ranks *= dims_[i].second;
    }
  }
  if (auto it = made_.find(key); it != made_.end()) return it->second;
  std::shared_ptr<comm::ProcessGroup> g;
  if (ranks == world_->size()) {
    g = world_;
  } else if (ranks == 1) {
    comm::ProcessGroupOptions o = world_->options();
    o.name = world_->name() + "/self";
    g = comm::LocalGroup::create(1, o).front();
    g->set_memory_tracker(world_->memory_tracker());
  } else {
    // Color: the coordinates outside the group, flattened; key: the position within it.
    int color = 0, position = 0;
    for (size_t i = 0; i < dims_.size(); ++i) {
      bool in = false;
      for (int a : key) in |= a == static_cast<int>(i);
      if (in)
        position = position * dims_[i].second + coords_[i];
      else
        color = color * dims_[i].second + coords_[i];
    }
    g = world_->split(color, position, world_->name() + "/" + name);
  }
  made_[key] = g;
  return g;
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
  for (const auto& [name, along] : along_)
    if (along.size() > 1) names << " " << name;
  BRAID_THROW("DeviceMesh: no dimension '", dim, "' (have:", names.str(), ")");
}

int DeviceMesh::size(const std::string& dim) const {
  auto it = along_.find(dim);
  if (it == along_.end()) index(dim);  // throws naming the dimensions and groups
  int n = 1;
  for (int a : it->second) n *= dims_[static_cast<size_t>(a)].second;
  return n;
}

int DeviceMesh::coord(const std::string& dim) const {
  auto it = along_.find(dim);
  if (it == along_.end()) index(dim);
  int c = 0;  // row-major over the group's dimensions, as its ranks are ordered
  for (int a : it->second)
    c = c * dims_[static_cast<size_t>(a)].second + coords_[static_cast<size_t>(a)];
  return c;
}

std::shared_ptr<comm::ProcessGroup> DeviceMesh::group_ptr(const std::string& dim) const {
  auto it = along_.find(dim);
  if (it == along_.end()) index(dim);  // throws naming the dimensions and groups
  return make_group(it->second, dim);
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
