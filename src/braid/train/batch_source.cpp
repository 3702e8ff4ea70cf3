#include "braid/train/batch_source.h"

#include "braid/core/error.h"
#include "braid/core/rng.h"

namespace braid::train {

RandomTokenSource::RandomTokenSource(int64_t batch, int64_t seq_len, int64_t vocab, uint64_t seed,
                                     int rank, int world)
    : batch_(batch), seq_len_(seq_len), vocab_(vocab), seed_(seed), rank_(rank), world_(world) {
  BRAID_CHECK(vocab > 0, "random tokens need a vocabulary size, got ", vocab);
}

data::Batch RandomTokenSource::next() {
  data::Batch b;
  // On the host whatever the default device (Note [Training device]): filled here.
  const auto& tracker = MemoryScope::current_tracker();
  b.inputs = Tensor::empty(Shape{batch_, seq_len_}, DType::i32, MemCategory::activations, tracker,
                           Device::cpu());
  b.targets = Tensor::empty(Shape{batch_, seq_len_}, DType::i32, MemCategory::activations, tracker,
                            Device::cpu());
  b.state = {0, counter_};
  b.counted = batch_ * seq_len_;
  int32_t* in = b.inputs.data<int32_t>();
  int32_t* tg = b.targets.data<int32_t>();
  const int64_t first = counter_++ * batch_ * world_ + rank_ * batch_;
  for (int64_t j = 0; j < batch_; ++j) {
    Rng rng = Rng(seed_).fork(static_cast<uint64_t>(first + j));
    int32_t prev = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab_)));
    for (int64_t t = 0; t < seq_len_; ++t) {
      int32_t cur = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab_)));
      in[j * seq_len_ + t] = prev;
      tg[j * seq_len_ + t] = cur;
      prev = cur;
    }
  }
  return b;
}

ShardSource::ShardSource(const std::string& dir, const std::string& split,
                         const data::DataLoaderOptions& options)
    : loader_(data::DataLoader::from_dir(dir, split, options)) {}

void ShardSource::seek(int64_t batches) {
  const int64_t per_epoch = loader_->batches_per_epoch();
  loader_->set_state({batches / per_epoch, batches % per_epoch});
}

}  // namespace braid::train
