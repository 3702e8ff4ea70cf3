// Splitting blocks into pipeline stages: uniform, and balanced (the optimum and its tie-break,
// checked against enumeration on small cases).
#include "braid/parallel/pipeline/partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <tuple>

#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "testing/run_ranks.h"

namespace braid::parallel::pipeline {
namespace {

using Parts = std::vector<BlockRange>;

double largest(const Parts& parts, const std::vector<double>& costs, double first, double last) {
  double worst = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    double c = (k == 0 ? first : 0) + (k + 1 == parts.size() ? last : 0);
    for (int b = parts[k].begin; b < parts[k].end; ++b) c += costs[static_cast<size_t>(b)];
    worst = std::max(worst, c);
  }
  return worst;
}

// Every split of the blocks into `parts` non-empty ranges.
std::vector<Parts> all_splits(int n, int parts) {
  std::vector<Parts> out;
  Parts cur;
  std::function<void(int, int)> go = [&](int start, int left) {
    for (int e = start + 1; e <= n - left + 1; ++e) {
      if (left == 1 && e != n) continue;
      cur.push_back({start, e});
      if (left == 1) {
        out.push_back(cur);
      } else {
        go(e, left - 1);
      }
      cur.pop_back();
    }
  };
  go(0, parts);
  return out;
}

// Note [Balanced ties] by enumeration: stage by stage, of the splits that agree with the cuts
// taken so far, the earliest end among those whose stages from here on have the smallest
// largest cost.
Parts brute_force(const std::vector<double>& costs, double first, double last, int parts) {
  std::vector<Parts> candidates = all_splits(static_cast<int>(costs.size()), parts);
  auto rest = [&](const Parts& split, size_t k) {
    double worst = 0;
    for (size_t j = k; j < split.size(); ++j) {
      double c = (j == 0 ? first : 0) + (j + 1 == split.size() ? last : 0);
      for (int b = split[j].begin; b < split[j].end; ++b) c += costs[static_cast<size_t>(b)];
      worst = std::max(worst, c);
    }
    return worst;
  };
  for (size_t k = 0; k < static_cast<size_t>(parts); ++k) {
    double best = 1e300;
    for (const Parts& s : candidates) best = std::min(best, rest(s, k));
    int end = 1 << 30;
    for (const Parts& s : candidates)
      if (rest(s, k) == best) end = std::min(end, s[k].end);
    std::erase_if(candidates, [&](const Parts& s) { return s[k].end != end; });
  }
  return candidates.at(0);
}

using braid::testing::error_of;

TEST(PipelinePartition, Uniform) {
  EXPECT_EQ(uniform_partition(8, 2, 2), (Parts{{0, 2}, {2, 4}, {4, 6}, {6, 8}}));
  EXPECT_EQ(uniform_partition(3, 1, 1), (Parts{{0, 3}}));
  EXPECT_EQ(describe_partition(uniform_partition(6, 2, 1)), "[0,3) [3,6)");
}

TEST(PipelinePartition, BalancedWithEqualCostsIsUniform) {
  for (auto [n, pp, v] : {std::tuple{8, 4, 1}, {12, 2, 3}, {6, 6, 1}, {4, 1, 1}})
    EXPECT_EQ(balanced_partition(std::vector<double>(static_cast<size_t>(n), 1.0), 0, 0, pp, v),
              uniform_partition(n, pp, v))
        << n << " " << pp << " " << v;
}

TEST(PipelinePartition, HeavyEndsMoveBlocks) {
  const std::vector<double> six(6, 1.0);
  // Heavy embeddings push blocks to the later stages, a heavy head to the earlier ones.
  EXPECT_EQ(balanced_partition(six, 2, 0, 2, 1), (Parts{{0, 2}, {2, 6}}));
  EXPECT_EQ(balanced_partition(six, 0, 2, 2, 1), (Parts{{0, 4}, {4, 6}}));
  // Embeddings heavier than everything else: the first stage keeps one block.
  EXPECT_EQ(balanced_partition(six, 100, 0, 3, 1), (Parts{{0, 1}, {1, 3}, {3, 6}}));
  // A tie takes the earliest cuts: [0,1) [1,3) and [0,2) [2,3) both cost 2 at most.
  EXPECT_EQ(balanced_partition({1, 1, 1}, 0, 0, 2, 1), (Parts{{0, 1}, {1, 3}}));
}

TEST(PipelinePartition, BalancedIsTheOptimumOfEnumeration) {
  Rng rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng.below(9));
    const int v = n == 1 ? 1 : 1 + static_cast<int>(rng.below(2));
    const int pp = std::max(1, static_cast<int>(rng.below(static_cast<uint64_t>(n / v) + 1)));
    // Small integers: sums are exact, so ties are common and the tie-break is checked too.
    std::vector<double> costs;
    for (int i = 0; i < n; ++i) costs.push_back(static_cast<double>(rng.below(4)));
    const double first = static_cast<double>(rng.below(5)),
                 last = static_cast<double>(rng.below(5));
    const Parts parts = balanced_partition(costs, first, last, pp, v);
    EXPECT_EQ(parts, brute_force(costs, first, last, pp * v))
        << "trial " << trial << ": " << describe_partition(parts);
  }
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 2 + static_cast<int>(rng.below(8));
    const int pp = 1 + static_cast<int>(rng.below(static_cast<uint64_t>(n)));
    std::vector<double> costs;
    for (int i = 0; i < n; ++i) costs.push_back(0.5 + rng.uniform());
    const double first = rng.uniform() * 2, last = rng.uniform() * 3;
    const Parts parts = balanced_partition(costs, first, last, pp, 1);
    ASSERT_EQ(parts.size(), static_cast<size_t>(pp));
    int at = 0;
    for (const BlockRange& r : parts) {
      EXPECT_EQ(r.begin, at);
      EXPECT_GT(r.size(), 0);
      at = r.end;
    }
    EXPECT_EQ(at, n);
    double best = 1e300;
    for (const Parts& s : all_splits(n, pp)) best = std::min(best, largest(s, costs, first, last));
    EXPECT_NEAR(largest(parts, costs, first, last), best, 1e-12);
  }
}

TEST(PipelinePartition, ErrorsNameTheKeys) {
  EXPECT_EQ(error_of([] { uniform_partition(6, 2, 2); }),
            "n_layer 6 is not divisible by 4 pipeline stages (parallel.pipeline_parallel_size 2 "
            "x parallel.pipeline_virtual_stages 2); set parallel.pipeline_balance: parameters or "
            "time for uneven stages");
  const std::string too_few =
      "parallel.pipeline_parallel_size 4 x parallel.pipeline_virtual_stages 2 = 8 pipeline "
      "stages but the model has 6 layers (n_layer): every stage needs a block";
  // Checked before divisibility: 6 is not a multiple of 8 either.
  EXPECT_EQ(error_of([] { uniform_partition(6, 4, 2); }), too_few);
  EXPECT_EQ(error_of([] { balanced_partition(std::vector<double>(6, 1.0), 0, 0, 4, 2); }), too_few);
  EXPECT_NE(error_of([] { uniform_partition(6, 0, 1); }).find("parallel.pipeline_parallel_size"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              balanced_partition({1, -1}, 0, 0, 1, 1);
            }).find("block 1 has cost -1"),
            std::string::npos);
}

}  // namespace
}  // namespace braid::parallel::pipeline
