#include "braid/data/distributed_sampler.h"

#include <numeric>
#include <utility>

#include "braid/core/error.h"
#include "braid/core/rng.h"

namespace braid::data {

DistributedSampler::DistributedSampler(int64_t num_samples, int world, int rank,
                                       SamplerOptions options)
    : num_samples_(num_samples), world_(world), rank_(rank), options_(options) {
  BRAID_CHECK(world >= 1, "DistributedSampler: world size ", world, " must be at least 1");
  BRAID_CHECK(rank >= 0 && rank < world, "DistributedSampler: rank ", rank, " outside [0, ", world,
              ")");
  BRAID_CHECK(num_samples > 0, "DistributedSampler: no samples to draw from (0 samples)");
  if (options.drop_last) {
    BRAID_CHECK(num_samples >= world, "DistributedSampler: world size ", world, " > ", num_samples,
                " samples: with drop_last every rank would get 0 samples ",
                "(use more data, a shorter sequence, fewer ranks, or drop_last=false)");
    per_rank_ = num_samples / world;
  } else {
    per_rank_ = (num_samples + world - 1) / world;
  }
  set_epoch(0);
}

void DistributedSampler::set_epoch(int64_t epoch) {
  BRAID_CHECK(epoch >= 0, "DistributedSampler: epoch ", epoch, " is negative");
  if (epoch == epoch_) return;
  epoch_ = epoch;
  if (!options_.shuffle) return;
  // Fisher-Yates from a stream that depends only on (seed, epoch).
  order_.resize(static_cast<size_t>(num_samples_));
  std::iota(order_.begin(), order_.end(), int64_t{0});
  Rng rng = Rng(options_.seed).fork(static_cast<uint64_t>(epoch));
  for (int64_t i = num_samples_ - 1; i > 0; --i) {
    auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i + 1)));
    std::swap(order_[i], order_[j]);
  }
}

int64_t DistributedSampler::operator[](int64_t i) const {
  BRAID_CHECK(i >= 0 && i < per_rank_, "DistributedSampler: rank ", rank_, " has ", per_rank_,
              " samples per epoch, asked for sample ", i);
  // Position in the padded or truncated global order; padding repeats the order from its start.
  int64_t pos = (rank_ + i * world_) % num_samples_;
  return options_.shuffle ? order_[pos] : pos;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> out(static_cast<size_t>(per_rank_));
  for (int64_t i = 0; i < per_rank_; ++i) out[i] = (*this)[i];
  return out;
}

}  // namespace braid::data
