#include "braid/data/data_loader.h"

#include <cstring>

#include "braid/core/error.h"
#include "braid/data/token_flags.h"

namespace braid::data {

namespace {
int64_t stride_of(const DataLoaderOptions& o) {
  return o.stride > 0 ? o.stride : o.seq_len;
}

const DataLoaderOptions& checked(const DataLoaderOptions& o) {
  BRAID_CHECK(o.seq_len >= 1, "DataLoader: seq_len ", o.seq_len, " must be at least 1");
  BRAID_CHECK(o.batch_size >= 1, "DataLoader: batch_size ", o.batch_size, " must be at least 1");
  BRAID_CHECK(o.stride >= 0, "DataLoader: stride ", o.stride, " is negative");
  BRAID_CHECK(o.prefetch >= 1, "DataLoader: prefetch ", o.prefetch, " must be at least 1");
  return o;
}
}  // namespace

DataLoader::DataLoader(const std::vector<std::string>& shard_paths,
                       const DataLoaderOptions& options)
    : options_(checked(options)),
      dataset_(shard_paths, options.seq_len + 1, stride_of(options), options.vocab_size),
      tracker_(MemoryScope::current_tracker()) {
  // Sizes the epoch and checks world/rank against the sample count, before any thread starts.
  DistributedSampler sampler(dataset_.num_samples(), options_.world, options_.rank,
                             {options_.shuffle, options_.seed, options_.drop_last});
  batches_per_epoch_ = sampler.size() / options_.batch_size;
  BRAID_CHECK(batches_per_epoch_ > 0, "DataLoader: rank ", options_.rank, " of ", options_.world,
              " gets ", sampler.size(), " samples per epoch (", dataset_.num_samples(),
              " samples of ", options_.seq_len + 1, " tokens in ", dataset_.num_tokens(),
              " tokens), fewer than one batch of ", options_.batch_size);
  start();
}

std::unique_ptr<DataLoader> DataLoader::from_dir(const std::string& dir, const std::string& split,
                                                 const DataLoaderOptions& options) {
  return std::make_unique<DataLoader>(TokenDataset::find_shards(dir, split), options);
}

DataLoader::~DataLoader() {
  stop();
}

void DataLoader::start() {
  stopping_ = false;
  thread_ = std::thread([this, from = state_] { produce(from); });
}

void DataLoader::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  queue_.clear();
  error_ = nullptr;
}

void DataLoader::set_state(const DataLoaderState& state) {
  BRAID_CHECK(state.epoch >= 0 && state.position >= 0 && state.position <= batches_per_epoch_,
              "DataLoader: state (epoch ", state.epoch, ", position ", state.position,
              ") is outside an epoch of ", batches_per_epoch_, " batches");
  stop();
  state_ = state;
  if (state_.position == batches_per_epoch_) state_ = {state_.epoch + 1, 0};
  start();
}

Batch DataLoader::next() {
  Batch b;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty() || error_; });
    if (queue_.empty()) std::rethrow_exception(error_);
    b = std::move(queue_.front());
    queue_.pop_front();
  }
  cv_.notify_all();
  BRAID_CHECK(b.state == state_, "DataLoader: internal error: expected batch (epoch ", state_.epoch,
              ", position ", state_.position, "), got (", b.state.epoch, ", ", b.state.position,
              ")");
  state_.position += 1;
  if (state_.position == batches_per_epoch_) state_ = {state_.epoch + 1, 0};
  return b;
}

Batch DataLoader::make_batch(DistributedSampler& sampler, const DataLoaderState& at,
                             std::vector<int32_t>& window, std::vector<int32_t>& flags) const {
  const int64_t B = options_.batch_size, T = options_.seq_len;
  sampler.set_epoch(at.epoch);
  Batch b;
  b.state = at;
  // On the host whatever the default device: the loader fills them (a trainer copies them over).
  b.inputs = Tensor::empty(Shape{B, T}, DType::i32, MemCategory::other, tracker_, Device::cpu());
  b.targets = Tensor::empty(Shape{B, T}, DType::i32, MemCategory::other, tracker_, Device::cpu());
  int32_t* in = b.inputs.data<int32_t>();
  int32_t* tg = b.targets.data<int32_t>();
  b.counted = B * T;
  int32_t* pos = nullptr;
  if (options_.positions) {
    BRAID_CHECK(dataset_.has_flags(), "DataLoader: positions of packed rows need flag shards");
    b.positions =
        Tensor::empty(Shape{B, T}, DType::i32, MemCategory::other, tracker_, Device::cpu());
    pos = b.positions.data<int32_t>();
  }
  for (int64_t r = 0; r < B; ++r) {
    dataset_.read_sample(sampler[at.position * B + r], window.data(), flags.data());
    std::memcpy(in + r * T, window.data(), static_cast<size_t>(T) * sizeof(int32_t));
    std::memcpy(tg + r * T, window.data() + 1, static_cast<size_t>(T) * sizeof(int32_t));
    if (!dataset_.has_flags()) continue;
    for (int64_t t = 0; pos && t < T; ++t)
      pos[r * T + t] = t == 0 || (flags[static_cast<size_t>(t)] & kFlagSegmentStart)
                           ? 0
                           : pos[r * T + t - 1] + 1;
    // Note [Token flags]: only a trained token that does not begin an example is a target.
    for (int64_t t = 0; t < T; ++t) {
      const int32_t f = flags[static_cast<size_t>(t + 1)];
      if ((f & kFlagTarget) && !(f & kFlagSegmentStart)) continue;
      tg[r * T + t] = kIgnoreTarget;
      --b.counted;
    }
  }
  return b;
}

void DataLoader::produce(DataLoaderState at) {
  try {
    DistributedSampler sampler(dataset_.num_samples(), options_.world, options_.rank,
                               {options_.shuffle, options_.seed, options_.drop_last});
    std::vector<int32_t> window(static_cast<size_t>(options_.seq_len + 1));
    std::vector<int32_t> flags(dataset_.has_flags() ? window.size() : 0);
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] {
          return stopping_ || static_cast<int64_t>(queue_.size()) < options_.prefetch;
        });
        if (stopping_) return;
      }
      Batch b = make_batch(sampler, at, window, flags);  // outside the lock: the slow part
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
        queue_.push_back(std::move(b));
      }
      cv_.notify_all();
      at.position += 1;
      if (at.position == batches_per_epoch_) at = {at.epoch + 1, 0};
    }
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
    }
    cv_.notify_all();
  }
}

}  // namespace braid::data
