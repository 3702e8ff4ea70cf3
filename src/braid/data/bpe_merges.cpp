#include "braid/data/bpe_merges.h"

#include <functional>
#include <queue>

namespace braid::data {

// Note [Merge order]: OpenAI's reference (and HF's BPE model) repeatedly takes the lowest-rank
// adjacent pair and merges all its occurrences left to right. A min-heap of (rank, position)
// over a linked list of symbols does the same in O(n log n): pairs created by a merge contain
// the merged token, so their ranks are higher than the one being applied, and equal ranks pop
// leftmost first.
void BpeMerges::apply(std::vector<int32_t>& ids) const {
  const auto n = static_cast<int32_t>(ids.size());
  if (n < 2) return;
  struct Sym {
    int32_t id, prev, next;
  };
  std::vector<Sym> syms(n);
  for (int32_t i = 0; i < n; ++i) syms[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1};
  struct Cand {
    int32_t rank, pos, left, right, merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || syms[pos].next < 0) return;
    const int32_t next = syms[pos].next;
    auto it = table_.find(key(syms[pos].id, syms[next].id));
    if (it != table_.end()) {
      heap.push({it->second.first, pos, syms[pos].id, syms[next].id, it->second.second});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    Sym& s = syms[c.pos];
    if (s.id != c.left || s.next < 0 || syms[s.next].id != c.right) continue;  // stale
    const int32_t gone = s.next;
    s.id = c.merged;
    s.next = syms[gone].next;
    if (s.next >= 0) syms[s.next].prev = c.pos;
    syms[gone].id = -1;
    push(s.prev);
    push(c.pos);
  }
  ids.clear();
  for (int32_t i = 0; i >= 0; i = syms[i].next) ids.push_back(syms[i].id);
}

}  // namespace braid::data
