// Where a rank's micro-batches come from: prepared token shards (data::DataLoader over this
// rank's DistributedSampler share) or synthetic random tokens (benchmarks).
//
// Random tokens: sample i (a global index) is drawn from Rng(seed).fork(i). Micro-step c of
// rank r holds samples c B W + r B + j (j < B, W ranks), so an optimizer step always covers
// the same contiguous block of samples whatever the micro-batch, accumulation and world size
// (the same holds for shards through DistributedSampler's strided split). That is what makes
// N ranks x batch B, 1 rank x batch N B and accumulation comparable exactly.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "braid/data/data_loader.h"

namespace braid::train {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual data::Batch next() = 0;
  virtual int64_t vocab_size() const = 0;
  // Whether targets may be masked (flag shards, Note [Token flags]): the loss then counts them.
  virtual bool masked() const { return false; }
  // Continues as if `batches` batches had been read from the start (a resumed run).
  virtual void seek(int64_t batches) = 0;
};

class RandomTokenSource : public BatchSource {
 public:
  RandomTokenSource(int64_t batch, int64_t seq_len, int64_t vocab, uint64_t seed, int rank,
                    int world);
  data::Batch next() override;
  int64_t vocab_size() const override { return vocab_; }
  void seek(int64_t batches) override { counter_ = batches; }

 private:
  int64_t batch_, seq_len_, vocab_;
  uint64_t seed_;
  int rank_, world_;
  int64_t counter_ = 0;
};

class ShardSource : public BatchSource {
 public:
  ShardSource(const std::string& dir, const std::string& split,
              const data::DataLoaderOptions& options);
  data::Batch next() override { return loader_->next(); }
  int64_t vocab_size() const override { return loader_->vocab_size(); }
  bool masked() const override { return loader_->masked(); }
  void seek(int64_t batches) override;
  data::DataLoader& loader() { return *loader_; }

 private:
  std::unique_ptr<data::DataLoader> loader_;
};

}  // namespace braid::train
