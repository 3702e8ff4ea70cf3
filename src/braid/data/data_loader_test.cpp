#include "braid/data/data_loader.h"

#include <gtest/gtest.h>

#include <fstream>
#include <numeric>
#include <set>

#include "braid/core/error.h"
#include "braid/data/test_util.h"
#include "braid/data/token_shard.h"

namespace braid::data {
namespace {

using testutil::error_of;
using testutil::TempDir;

// Shards whose token at stream position p is p % vocab, so every window is predictable.
std::vector<std::string> counting_shards(const TempDir& dir, std::vector<int64_t> sizes,
                                         int64_t vocab = 1000) {
  std::vector<std::string> paths;
  int64_t p = 0;
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::vector<int32_t> ids(static_cast<size_t>(sizes[s]));
    for (auto& id : ids) id = static_cast<int32_t>(p++ % vocab);
    paths.push_back(dir.file("train_" + std::to_string(s) + ".bin"));
    write_token_shard(paths.back(), ids, vocab);
  }
  return paths;
}

std::vector<int32_t> values(const Tensor& t) {
  const int32_t* p = t.data<int32_t>();
  return {p, p + t.numel()};
}

TEST(DataLoader, BatchesAreShiftedWindowsAcrossShards) {
  TempDir dir;
  auto shards = counting_shards(dir, {10, 3, 20});  // 33 tokens; windows of 5 at stride 4
  DataLoaderOptions o;
  o.batch_size = 2;
  o.seq_len = 4;
  o.shuffle = false;
  DataLoader loader(shards, o);
  EXPECT_EQ(loader.num_samples(), 8);  // (33 - 5) / 4 + 1
  EXPECT_EQ(loader.batches_per_epoch(), 4);
  for (int64_t b = 0; b < 4; ++b) {
    Batch batch = loader.next();
    EXPECT_EQ(batch.inputs.shape(), (Shape{2, 4}));
    EXPECT_EQ(batch.inputs.dtype(), DType::i32);
    auto in = values(batch.inputs), tg = values(batch.targets);
    for (int64_t r = 0; r < 2; ++r) {
      for (int64_t t = 0; t < 4; ++t) {
        int32_t start = static_cast<int32_t>((b * 2 + r) * 4);
        EXPECT_EQ(in[r * 4 + t], start + t);
        EXPECT_EQ(tg[r * 4 + t], start + t + 1);
      }
    }
  }
  EXPECT_EQ(loader.state(), (DataLoaderState{1, 0}));
  EXPECT_EQ(values(loader.next().inputs)[0], 0);  // epoch 1 starts over
}

TEST(DataLoader, RanksSeeDisjointSamples) {
  TempDir dir;
  auto shards = counting_shards(dir, {4001}, 100000);
  for (int world = 1; world <= 4; ++world) {
    std::set<int32_t> starts;
    int64_t total = 0;
    for (int r = 0; r < world; ++r) {
      DataLoaderOptions o{.batch_size = 5, .seq_len = 8, .world = world, .rank = r, .seed = 3};
      DataLoader loader(shards, o);
      for (int64_t b = 0; b < loader.batches_per_epoch(); ++b) {
        auto in = values(loader.next().inputs);
        for (int64_t row = 0; row < 5; ++row) starts.insert(in[row * 8]);
        total += 5;
      }
    }
    EXPECT_EQ(static_cast<int64_t>(starts.size()), total) << "world " << world;
    EXPECT_GE(total, 500 - 5 * world);  // 500 samples; at most a partial batch per rank unused
  }
}

TEST(DataLoader, ResumedLoaderYieldsTheSameBatches) {
  TempDir dir;
  auto shards = counting_shards(dir, {3000, 2000}, 50257);
  DataLoaderOptions o{
      .batch_size = 4, .seq_len = 16, .world = 2, .rank = 1, .seed = 11, .prefetch = 3};
  DataLoader a(shards, o);
  const int64_t per_epoch = a.batches_per_epoch();
  ASSERT_EQ(per_epoch, 39);                          // 312 samples / 2 ranks / 4
  for (int i = 0; i < per_epoch + 5; ++i) a.next();  // into epoch 1
  DataLoaderState saved = a.state();
  EXPECT_EQ(saved, (DataLoaderState{1, 5}));
  std::vector<std::vector<int32_t>> want;
  for (int i = 0; i < per_epoch; ++i) want.push_back(values(a.next().inputs));  // into epoch 2

  DataLoader b(shards, o);
  b.next();
  b.set_state(saved);
  for (int i = 0; i < per_epoch; ++i) {
    Batch batch = b.next();
    EXPECT_EQ(values(batch.inputs), want[i]) << "batch " << i << " after resume";
  }
  // Epochs reshuffle: the first batch of epoch 1 differs from that of epoch 0.
  DataLoader c(shards, o);
  auto e0 = values(c.next().inputs);
  c.set_state({1, 0});
  EXPECT_NE(values(c.next().inputs), e0);
  EXPECT_THROW(c.set_state({0, per_epoch + 1}), Error);
}

TEST(DataLoader, OutOfRangeTokenNamesShardAndOffset) {
  TempDir dir;
  auto shards = counting_shards(dir, {50, 50}, 1000);
  std::vector<int32_t> ids(50, 1);
  ids[17] = 700;
  write_token_shard(shards[1], ids, 1000);
  DataLoaderOptions o{.batch_size = 1, .seq_len = 9, .shuffle = false, .vocab_size = 512};
  DataLoader loader(shards, o);
  auto msg = error_of([&] {
    for (int i = 0; i < 20; ++i) loader.next();
  });
  EXPECT_NE(msg.find(shards[1]), std::string::npos) << msg;
  EXPECT_NE(msg.find("token 700 at token offset 17"), std::string::npos) << msg;
}

// Note [First-touch verification]: the prefetch thread verifies each chunk it reads first, and
// next() gives its error, naming the shard and the chunk's bytes.
TEST(DataLoader, AFlippedByteFailsTheBatchThatReadsItNamingShardAndChunk) {
  TempDir dir;
  auto shards = counting_shards(dir, {50});
  std::vector<int32_t> ids(500);
  std::iota(ids.begin(), ids.end(), 0);
  write_token_shard(shards[0], ids, 1000, /*chunk_bytes=*/128);
  {
    std::fstream f(shards[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64 + 130);  // token 65, in chunk 1
    f.put('\x55');
  }
  DataLoaderOptions o{.batch_size = 1, .seq_len = 9, .shuffle = false};
  DataLoader loader(shards, o);
  for (int i = 0; i < 7; ++i) EXPECT_NO_THROW(loader.next()) << i;  // tokens [0, 64): chunk 0
  auto msg = error_of([&] { loader.next(); });                      // tokens [63, 73)
  EXPECT_EQ(msg, "token shard '" + shards[0] +
                     "': corrupt: chunk 1 (file bytes [192, 320)) does not match its checksum at "
                     "offset 1072");
}

TEST(DataLoader, TooLittleDataIsAnError) {
  TempDir dir;
  auto shards = counting_shards(dir, {20});
  auto msg = error_of([&] { DataLoader l(shards, {.batch_size = 1, .seq_len = 64}); });
  EXPECT_NE(msg.find("20 tokens"), std::string::npos) << msg;
  msg = error_of([&] {
    DataLoader l(shards, {.batch_size = 1, .seq_len = 4, .world = 8, .rank = 0, .drop_last = true});
  });
  EXPECT_NE(msg.find("world size 8 > 4 samples"), std::string::npos) << msg;
  msg = error_of([&] { DataLoader l(shards, {.batch_size = 8, .seq_len = 4}); });
  EXPECT_NE(msg.find("fewer than one batch of 8"), std::string::npos) << msg;
}

TEST(DataLoader, StopsCleanlyWithBatchesInFlight) {
  TempDir dir;
  auto shards = counting_shards(dir, {10000});
  for (int i = 0; i < 20; ++i) {
    DataLoader l(shards, {.batch_size = 2, .seq_len = 8, .prefetch = 4});
    if (i % 2) l.next();
  }
}

TEST(DataLoader, ChargesBatchesToTheTracker) {
  TempDir dir;
  auto shards = counting_shards(dir, {1000});
  auto tracker = std::make_shared<MemoryTracker>();
  MemoryScope scope(tracker);
  {
    DataLoader l(shards, {.batch_size = 2, .seq_len = 8, .prefetch = 1});
    Batch b = l.next();
    EXPECT_GE(tracker->current(MemCategory::other), 2 * 2 * 8 * 4);
  }
  EXPECT_EQ(tracker->current(MemCategory::other), 0);
}

}  // namespace
}  // namespace braid::data
