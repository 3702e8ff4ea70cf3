#include "braid/optim/param_groups.h"

#include <algorithm>
#include <cctype>

namespace braid::optim {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool contains_any(const std::string& name, const std::vector<std::string>& parts) {
  std::string n = lower(name);
  return std::any_of(parts.begin(), parts.end(), [&](const std::string& p) {
    return !p.empty() && n.find(lower(p)) != std::string::npos;
  });
}

}  // namespace

bool is_no_decay(const ParamSlice& p, const DecaySplitOptions& options) {
  if (contains_any(p.name(), options.force_decay_name_parts)) return false;
  if (options.no_decay_below_rank_2 && p.shard.global_shape.dim() < 2) return true;
  return contains_any(p.name(), options.no_decay_name_parts);
}

std::vector<ParamGroup> split_decay_groups(const std::vector<ParamSlice>& params,
                                           const DecaySplitOptions& options) {
  std::vector<ParamGroup> groups(2);
  groups[0].weight_decay = options.weight_decay;
  groups[1].weight_decay = 0.0f;
  for (const ParamSlice& p : params) groups[is_no_decay(p, options) ? 1 : 0].params.push_back(p);
  return groups;
}

}  // namespace braid::optim
