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

// Note [Owners by size]: whole items (the tensors every replica holds) given to ranks so that
// each owns about the same bytes: in order of their names, each to the rank owning least so far
// (the lowest of equals). A checkpoint save picks the rank that writes a tensor every rank
// holds the same way (checkpoint/save_plan.cpp, assign_writers), so a replica that loads what it
// owns reads the file it wrote (Note [Ranged loads]). owner[i] is item i's rank.
inline std::vector<int> owners_by_size(const std::vector<std::string>& names,
                                       const std::vector<int64_t>& sizes, int world) {
  std::vector<size_t> order(names.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return names[a] < names[b]; });
  std::vector<int64_t> load(static_cast<size_t>(world), 0);
  std::vector<int> owner(names.size(), 0);
  for (size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end());
    owner[i] = static_cast<int>(least - load.begin());
    *least += sizes[i];
  }
  return owner;
}

}  // namespace braid::comm
