// DataLoader: fixed-size batches of next-token-prediction samples for one rank, read from token
// shards in the order a DistributedSampler gives, prefetched by a background thread.
//
// A batch is inputs [B, T] i32 and targets [B, T] i32 (targets are inputs shifted by one
// token; with flag shards, kIgnoreTarget where the flags say the token is not trained: Note
// [Token flags], token_flags.h); sample i is tokens [i * stride, i * stride + T + 1) of the shards'
// stream (stride defaults to T). An epoch is the rank's sampler order cut into batches_per_epoch()
// whole batches, the same count on every rank; next() moves on to the next epoch (reshuffled) by
// itself, forever. state() names the next batch to come, so a loader built with the same
// options and given that state with set_state() returns exactly the batches the first one would
// have.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "braid/core/memory_tracker.h"
#include "braid/core/tensor.h"
#include "braid/data/distributed_sampler.h"
#include "braid/data/token_dataset.h"

namespace braid::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;  // B, per rank (micro-batch)
  int64_t seq_len = 0;     // T
  int64_t stride = 0;      // tokens between sample starts; 0 = seq_len
  int world = 1;
  int rank = 0;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;  // sampler: cut the tail (true) or pad by repetition (false)
  int64_t vocab_size = 0;  // ids must be below it; 0 = the shards' header vocab size
  int prefetch = 2;        // batches the background thread keeps ready
  // Packed rows (Note [Packed rows], nn/sequence_layout.h): give each row's positions, from the
  // flag shards' example starts.
  bool positions = false;
};

struct DataLoaderState {
  int64_t epoch = 0;
  int64_t position = 0;  // batches of this epoch already returned
  bool operator==(const DataLoaderState&) const = default;
};

struct Batch {
  Tensor inputs;          // [B, T] i32
  Tensor targets;         // [B, T] i32
  int64_t counted = 0;    // targets that are not kIgnoreTarget
  Tensor positions;       // [B, T] i32 with DataLoaderOptions::positions: places in the examples
  DataLoaderState state;  // where this batch was: (epoch, index within the epoch)
};

class DataLoader {
 public:
  // Batches are charged to the constructing thread's MemoryScope tracker, category other.
  DataLoader(const std::vector<std::string>& shard_paths, const DataLoaderOptions& options);
  // dir/<split>_*.bin as written by prepare_data ("train" or "val").
  static std::unique_ptr<DataLoader> from_dir(const std::string& dir, const std::string& split,
                                              const DataLoaderOptions& options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next batch; rethrows any error the background thread met (e.g. a bad token id).
  Batch next();

  DataLoaderState state() const { return state_; }
  // Restarts reading at state (discarding what was prefetched).
  void set_state(const DataLoaderState& state);

  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  int64_t num_samples() const { return dataset_.num_samples(); }  // all ranks, one epoch
  int64_t vocab_size() const { return dataset_.vocab_size(); }
  bool masked() const { return dataset_.has_flags(); }  // flag shards mask targets
  const DataLoaderOptions& options() const { return options_; }

 private:
  void start();
  void stop();
  void produce(DataLoaderState from);  // the background thread
  Batch make_batch(DistributedSampler& sampler, const DataLoaderState& at,
                   std::vector<int32_t>& window, std::vector<int32_t>& flags) const;

  DataLoaderOptions options_;
  TokenDataset dataset_;
  int64_t batches_per_epoch_ = 0;
  std::shared_ptr<MemoryTracker> tracker_;
  DataLoaderState state_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  std::exception_ptr error_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace braid::data
