#include "braid/config/provenance.h"

#include <set>

namespace braid::config {

void Provenance::set(const std::string& key, const std::string& origin) {
  std::string line = origin;  // a comment ends at its line
  for (char& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  origins_[key] = line;
}

std::string Provenance::of(const std::string& key) const {
  auto it = origins_.find(key);
  return it == origins_.end() ? "braid default" : it->second;
}

void Provenance::add(const std::vector<DialectEntry>& entries) {
  std::set<std::string> set_here;  // keys these entries have set so far
  for (const auto& e : entries) {
    for (const auto& key : e.sets) {
      switch (e.how) {
        case DialectEntry::How::kept:
          if (set_here.count(key)) continue;  // "auto" keeps what this file's earlier key set
          set(key, e.source + ": " + e.origin + " (" + of(key) + ")");
          break;
        case DialectEntry::How::derived:
          set(key, e.origin + " (" + e.source + ")");
          break;
        default:
          set(key, e.source + ": " + e.origin);
      }
      set_here.insert(key);
    }
  }
}

}  // namespace braid::config
