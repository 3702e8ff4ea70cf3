// DistributedSampler: which samples each rank reads in an epoch, as PyTorch's
// torch.utils.data.DistributedSampler does it.
//
// Over num_samples samples, an epoch's order is 0..N-1, or with shuffle a permutation drawn
// from (seed, epoch) alone, so every rank computes the same one without talking. The order is
// then made divisible by world: drop_last cuts the tail, otherwise it is padded by repeating
// from its start. Rank r takes positions r, r + world, r + 2 world, ...: the ranks' sets are
// disjoint (up to the padding) and together cover every sample.
#pragma once

#include <cstdint>
#include <vector>

namespace braid::data {

struct SamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
};

class DistributedSampler {
 public:
  // Throws when num_samples is 0, rank is outside [0, world), or drop_last would leave a rank
  // with no sample (world > num_samples).
  DistributedSampler(int64_t num_samples, int world, int rank, SamplerOptions options = {});

  // Recomputes the order for epoch e (a no-op when e is the current epoch).
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  int64_t size() const { return per_rank_; }  // samples this rank gets per epoch, same on all
  int64_t total_size() const { return per_rank_ * world_; }
  int64_t num_samples() const { return num_samples_; }
  int world() const { return world_; }
  int rank() const { return rank_; }

  // This rank's i-th sample of the current epoch, i in [0, size()).
  int64_t operator[](int64_t i) const;
  std::vector<int64_t> indices() const;  // all of this rank's, in order

 private:
  int64_t num_samples_;
  int world_;
  int rank_;
  SamplerOptions options_;
  int64_t per_rank_ = 0;
  int64_t epoch_ = -1;
  std::vector<int64_t> order_;  // the epoch's permutation (empty without shuffle)
};

}  // namespace braid::data
