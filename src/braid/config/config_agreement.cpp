#include "braid/config/config_agreement.h"

#include <set>
#include <string>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/tensor.h"

namespace braid::config {

namespace {

// Paths name files that each node may keep at its own place; their contents are checked where
// they are read (shard headers, model shapes in the DDP broadcast).
const std::set<std::string> kPerNodeKeys = {
    "model.config", "model.init_from",      "data.train",    "data.tokenizer",
    "output.dir",   "parallel.offload_dir", "checkpoint.dir"};

int64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return static_cast<int64_t>(h);
}

}  // namespace

void check_config_agrees(const TrainConfig& cfg, comm::ProcessGroup& world) {
  const int w = world.size();
  if (w == 1) return;
  std::vector<std::pair<std::string, std::string>> entries;
  for (auto& e : config_entries(cfg))
    if (!kPerNodeKeys.count(e.first)) entries.push_back(std::move(e));
  const int64_t k = static_cast<int64_t>(entries.size());
  // Padded to an equal count on every rank: a rank built from other source code (other fields)
  // still takes part in the same all_gather, and differs in its count.
  const int64_t slots = k + 1;
  DeviceScope host(Device::cpu());  // host values, whatever the caller's default device
  Tensor mine = Tensor::zeros(Shape{slots}, DType::i64);
  int64_t* m = mine.data<int64_t>();
  m[0] = k;
  for (int64_t i = 0; i < k; ++i) m[i + 1] = fnv1a(entries[i].first + "=" + entries[i].second);
  Tensor all = Tensor::empty(Shape{slots * w}, DType::i64);
  world.all_gather(all, mine)->wait();
  const int64_t* a = all.data<int64_t>();

  std::set<int64_t> differing_fields;
  std::vector<int> differing_ranks;
  for (int r = 1; r < w; ++r) {
    bool differs = a[r * slots] != a[0];
    for (int64_t i = 0; i < k && a[r * slots] == a[0]; ++i)
      if (a[r * slots + i + 1] != a[i + 1]) differs = true, differing_fields.insert(i);
    if (differs) differing_ranks.push_back(r);
  }
  if (differing_ranks.empty()) return;
  std::string ranks, fields, values;
  for (int r : differing_ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  for (int64_t i : differing_fields) {
    fields += (fields.empty() ? "" : ", ") + entries[i].first;
    values += (values.empty() ? "" : ", ") + entries[i].first + " = " + entries[i].second;
  }
  if (fields.empty()) fields = "the set of config fields (ranks run different braid builds)";
  BRAID_THROW(
      "the config differs across ranks: rank(s) ", ranks, " differ from rank 0 in ", fields,
      values.empty() ? "" : "; this rank (" + std::to_string(world.rank()) + ") has " + values,
      ". Every rank must train the same config (same file and --set values)");
}

}  // namespace braid::config
