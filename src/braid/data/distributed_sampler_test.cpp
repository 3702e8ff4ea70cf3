#include "braid/data/distributed_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "braid/core/error.h"
#include "braid/data/test_util.h"

namespace braid::data {
namespace {

TEST(DistributedSampler, RanksAreDisjointAndCoverEverySample) {
  for (int64_t n : {1, 2, 7, 12, 13, 100}) {
    for (int world = 1; world <= 4; ++world) {
      for (bool shuffle : {false, true}) {
        for (bool drop_last : {false, true}) {
          if (drop_last && n < world) continue;
          std::vector<int64_t> all;
          int64_t per_rank = -1;
          for (int r = 0; r < world; ++r) {
            DistributedSampler s(n, world, r, {shuffle, 42, drop_last});
            s.set_epoch(3);
            if (per_rank < 0) per_rank = s.size();
            EXPECT_EQ(s.size(), per_rank) << "every rank gets the same count";
            auto idx = s.indices();
            all.insert(all.end(), idx.begin(), idx.end());
          }
          SCOPED_TRACE(::testing::Message() << "n=" << n << " world=" << world << " shuffle="
                                            << shuffle << " drop_last=" << drop_last);
          std::set<int64_t> distinct(all.begin(), all.end());
          for (int64_t i : all) ASSERT_TRUE(i >= 0 && i < n);
          if (drop_last) {
            EXPECT_EQ(per_rank, n / world);
            EXPECT_EQ(distinct.size(), all.size());  // no sample twice
          } else {
            EXPECT_EQ(per_rank, (n + world - 1) / world);
            EXPECT_EQ(static_cast<int64_t>(distinct.size()), n);                    // every sample
            EXPECT_EQ(static_cast<int64_t>(all.size()) - n, per_rank * world - n);  // pad only
          }
        }
      }
    }
  }
}

TEST(DistributedSampler, UnshuffledIsStridedAndPadsFromTheStart) {
  DistributedSampler r0(5, 2, 0, {false, 0, false}), r1(5, 2, 1, {false, 0, false});
  EXPECT_EQ(r0.indices(), (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(r1.indices(), (std::vector<int64_t>{1, 3, 0}));  // padded with sample 0
}

TEST(DistributedSampler, ShuffleIsDeterministicAndChangesPerEpoch) {
  DistributedSampler a(1000, 2, 1, {true, 7, false}), b(1000, 2, 1, {true, 7, false});
  EXPECT_EQ(a.indices(), b.indices());
  auto e0 = a.indices();
  a.set_epoch(1);
  auto e1 = a.indices();
  EXPECT_NE(e0, e1);
  a.set_epoch(0);
  EXPECT_EQ(a.indices(), e0);  // an epoch's order depends on (seed, epoch) only
  DistributedSampler c(1000, 2, 1, {true, 8, false});
  EXPECT_NE(c.indices(), e0);
  auto sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(sorted, e0);
}

TEST(DistributedSampler, ErrorsNameTheNumbers) {
  auto msg = testutil::error_of([] { DistributedSampler s(3, 4, 0, {true, 0, true}); });
  EXPECT_NE(msg.find("world size 4 > 3 samples"), std::string::npos) << msg;
  EXPECT_THROW(DistributedSampler(3, 4, 4, {}), Error);
  EXPECT_THROW(DistributedSampler(0, 1, 0, {}), Error);
  DistributedSampler padded(3, 4, 3, {false, 0, false});  // padding gives each rank one
  EXPECT_EQ(padded.indices(), (std::vector<int64_t>{0}));
}

}  // namespace
}  // namespace braid::data
