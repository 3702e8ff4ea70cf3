// How a flat buffer of n elements is divided among the ranks of a group.
//
// Note [Uneven chunks]: rank r owns elements [offset, offset + size) where the first n % w ranks
// get ceil(n / w) elements and the rest floor(n / w), in rank order. reduce_scatter gives rank r
// chunk r of its input; all_gather takes chunk r of the output from rank r; all_to_all sends
// chunk j of the input to rank j. With n divisible by w every chunk is n / w.
#pragma once

#include <algorithm>
#include <cstdint>

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

}  // namespace braid::comm
