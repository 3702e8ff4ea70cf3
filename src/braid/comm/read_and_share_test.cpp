// ReadAndShare (Note [Shared as read]): each part reaches every rank from the rank that read
// it; a read that fails on one rank fails every rank after the last collective, with no rank
// left waiting in one.
#include "braid/comm/read_and_share.h"

#include <gtest/gtest.h>

#include <string>

#include "braid/core/error.h"
#include "testing/run_ranks.h"

namespace braid::comm {
namespace {

using braid::testing::run_ranks;
using braid::testing::run_ranks_collect;
using braid::testing::what;

constexpr int kRanks = 3, kParts = 7;

// Part p is read by rank p % kRanks, which fills it with 100 p + its rank.
void share_parts(ProcessGroup& pg, std::vector<Tensor>& parts, int failing_rank, int failing_part) {
  ReadAndShare load(&pg);
  for (int p = 0; p < kParts; ++p) {
    const int owner = p % kRanks;
    load.step(
        [&] {
          if (owner != pg.rank()) return;
          BRAID_CHECK(!(pg.rank() == failing_rank && p == failing_part), "part ", p,
                      " cannot be read");
          parts[static_cast<size_t>(p)].fill_(100.0 * p + owner);
        },
        [&](ProcessGroup& g) { return g.broadcast(parts[static_cast<size_t>(p)], owner); });
  }
  load.finish();
}

TEST(ReadAndShare, EveryPartReachesEveryRankFromItsReader) {
  run_ranks(kRanks, [](ProcessGroup& pg) {
    std::vector<Tensor> parts;
    for (int p = 0; p < kParts; ++p) parts.push_back(Tensor::zeros(Shape{1000 + 37 * p}));
    share_parts(pg, parts, -1, -1);
    for (int p = 0; p < kParts; ++p)
      for (float v : parts[static_cast<size_t>(p)].to_f32_vector())
        ASSERT_EQ(v, 100.0f * p + p % kRanks) << "rank " << pg.rank() << " part " << p;
  });
}

TEST(ReadAndShare, AFailedReadFailsEveryRankAfterTheCollectivesWithoutAHang) {
  const auto errors = run_ranks_collect(kRanks, [](ProcessGroup& pg) {
    std::vector<Tensor> parts;
    for (int p = 0; p < kParts; ++p) parts.push_back(Tensor::zeros(Shape{64}));
    share_parts(pg, parts, /*failing_rank=*/1, /*failing_part=*/1);
  });
  ASSERT_EQ(errors.size(), static_cast<size_t>(kRanks));
  EXPECT_NE(what(errors[1]).find("part 1 cannot be read"), std::string::npos) << what(errors[1]);
  for (int r : {0, 2}) {
    const std::string e = what(errors[static_cast<size_t>(r)]);
    EXPECT_NE(e.find("rank(s) 1"), std::string::npos) << e;
    EXPECT_NE(e.find("part 1 cannot be read"), std::string::npos) << e;
  }
}

TEST(ReadAndShare, AloneItOnlyReads) {
  std::vector<Tensor> parts;
  for (int p = 0; p < kParts; ++p) parts.push_back(Tensor::zeros(Shape{8}));
  ReadAndShare load(nullptr);
  int reads = 0;
  for (int p = 0; p < kParts; ++p)
    load.step([&] { ++reads; },
              [](ProcessGroup&) -> std::shared_ptr<Work> {
                ADD_FAILURE() << "no collective without a group";
                return nullptr;
              });
  load.finish();
  EXPECT_EQ(reads, kParts);
}

}  // namespace
}  // namespace braid::comm
