// BpeMerges: a BPE merge table over token ids, (left, right) -> (rank, merged), and the merge
// loop both BpeTokenizer and HfTokenizer run (Note [Merge order] in bpe_merges.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace braid::data {

class BpeMerges {
 public:
  // A repeated pair takes its last rank, as the references' dict(zip(merges, range(n))) do.
  void add(int32_t left, int32_t right, int32_t rank, int32_t merged) {
    table_.insert_or_assign(key(left, right), std::pair{rank, merged});
  }
  void reserve(size_t n) { table_.reserve(n); }
  size_t size() const { return table_.size(); }

  // Merges ids (the piece's initial symbols) in place, lowest rank first, leftmost first
  // among equal ranks.
  void apply(std::vector<int32_t>& ids) const;

 private:
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> table_;
};

}  // namespace braid::data
