#include "braid/config/closest_key.h"

#include <algorithm>
#include <cstdint>

namespace braid::config {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string closest_key(const std::string& key, const std::vector<std::string>& known) {
  const size_t dot = key.rfind('.');
  const std::string leaf = key.substr(dot == std::string::npos ? 0 : dot + 1);
  const std::string section = dot == std::string::npos ? "" : key.substr(0, dot);
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& k : known) {
    const size_t k_dot = k.rfind('.');
    const std::string k_leaf = k.substr(k_dot == std::string::npos ? 0 : k_dot + 1);
    const std::string k_section = k_dot == std::string::npos ? "" : k.substr(0, k_dot);
    size_t d = edit_distance(leaf, k_leaf) + (k_section == section ? 0 : 2);
    size_t limit = std::max<size_t>(1, std::max(leaf.size(), k_leaf.size()) / 3) + 2;
    if (d <= limit && d < best_d) best_d = d, best = k;
  }
  return best;
}

std::string did_you_mean(const std::string& key, const std::vector<std::string>& known) {
  const std::string best = closest_key(key, known);
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

}  // namespace braid::config
