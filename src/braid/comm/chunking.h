// How a flat buffer of n elements is divided among the ranks of a group.
//
// Note [Uneven chunks]: rank r owns elements [offset, offset + size) where the first n % w ranks
// get ceil(n / w) elements and the rest floor(n / w), in rank order. reduce_scatter gives rank r
// chunk r of its input; all_gather takes chunk r of the output from rank r; all_to_all sends
// chunk j of the input to rank j. With n divisible by w every chunk is n / w.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace braid::comm {

struct Chunk {
  int64_t offset = 0;
  int64_t size = 0;
};

inline Chunk chunk_of(int64_t n, int world, int rank) {
  int64_t base = n / world;
  int64_t rem = n % world;
  return {rank * base + std::min<int64_t>(rank, rem), base + (rank < rem ? 1 : 0)};
}

// Ownership balanced by bytes: each item, in the order offered, goes to the candidate rank that
// owns the fewest bytes so far (ties: the lowest rank). The one rule behind a checkpoint's
// writers (Note [One writer per range], checkpoint/save_plan.cpp) and a replica's share of a
// load (Note [Owners by size]). Offered largest first (largest_first: the greedy rule of longest
// processing time first), the totals end within one item of each other unless one item outweighs
// all the others together; in name order GPT-2 small's tied embedding came last, and under DDP
// on 2 ranks one replica wrote 974 MB of a 1.49 GB checkpoint, the other 520.
class LeastLoaded {
 public:
  explicit LeastLoaded(int world) : load_(static_cast<size_t>(world), 0) {}
  // Among `candidates` (ranks, ascending), charged `size`.
  int take(int64_t size, const std::vector<int>& candidates) {
    int best = candidates.front();
    for (int r : candidates)
      if (load_[static_cast<size_t>(r)] < load_[static_cast<size_t>(best)]) best = r;
    load_[static_cast<size_t>(best)] += size;
    return best;
  }
  // Among every rank.
  int take(int64_t size) {
    const auto least = std::min_element(load_.begin(), load_.end());
    *least += size;
    return static_cast<int>(least - load_.begin());
  }

 private:
  std::vector<int64_t> load_;
};

// The order in which LeastLoaded is offered items: by size, largest first, ties by `before`
// (a strict weak order on indices).
template <typename Before>
std::vector<size_t> largest_first(const std::vector<int64_t>& sizes, Before before) {
  std::vector<size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (sizes[a] != sizes[b]) return sizes[a] > sizes[b];
    return before(a, b);
  });
  return order;
}

// Note [Owners by size]: whole items every replica holds (DDP's parameters and their state),
// each owned by one of them: largest first, ties in order of their names, by LeastLoaded, as a
// checkpoint save picks their writers (Note [One writer per range]), so a replica that loads
// what it owns reads the file it wrote (Note [Ranged loads]). owner[i] is item i's rank.
inline std::vector<int> owners_by_size(const std::vector<std::string>& names,
                                       const std::vector<int64_t>& sizes, int world) {
  LeastLoaded owners(world);
  std::vector<int> owner(names.size(), 0);
  for (size_t i : largest_first(sizes, [&](size_t a, size_t b) { return names[a] < names[b]; }))
    owner[i] = owners.take(sizes[i]);
  return owner;
}

}  // namespace braid::comm
