// Splitting blocks into pipeline stages: uniform, and balanced (the optimum, checked by brute
// force on small cases).
#include "braid/parallel/pipeline/partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "braid/core/error.h"
#include "braid/core/rng.h"

namespace braid::parallel::pipeline {
namespace {

double largest(const std::vector<BlockRange>& parts, const std::vector<double>& costs, double first,
               double last) {
  double worst = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    double c = (k == 0 ? first : 0) + (k + 1 == parts.size() ? last : 0);
    for (int b = parts[k].begin; b < parts[k].end; ++b) c += costs[static_cast<size_t>(b)];
    worst = std::max(worst, c);
  }
  return worst;
}

// The best largest cost over every split of n blocks into k non-empty ranges.
double brute_force(const std::vector<double>& costs, double first, double last, int parts) {
  const int n = static_cast<int>(costs.size());
  double best = 1e300;
  std::vector<BlockRange> cur;
  std::function<void(int, int)> go = [&](int start, int left) {
    if (left == 1) {
      cur.push_back({start, n});
      best = std::min(best, largest(cur, costs, first, last));
      cur.pop_back();
      return;
    }
    for (int e = start + 1; e <= n - left + 1; ++e) {
      cur.push_back({start, e});
      go(e, left - 1);
      cur.pop_back();
    }
  };
  go(0, parts);
  return best;
}

TEST(PipelinePartition, Uniform) {
  EXPECT_EQ(uniform_partition(8, 2, 2), (std::vector<BlockRange>{{0, 2}, {2, 4}, {4, 6}, {6, 8}}));
  EXPECT_EQ(describe_partition(uniform_partition(6, 2, 1)), "[0,3) [3,6)");
}

TEST(PipelinePartition, BalancedIsOptimalAndContiguous) {
  EXPECT_EQ(balanced_partition(std::vector<double>(8, 1.0), 0, 0, 4, 1),
            uniform_partition(8, 4, 1));
  // A heavy head pushes blocks to the earlier stages.
  EXPECT_EQ(balanced_partition(std::vector<double>(6, 1.0), 0, 2, 2, 1),
            (std::vector<BlockRange>{{0, 4}, {4, 6}}));
  Rng rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 2 + static_cast<int>(rng.next_u64() % 8);
    const int pp = 1 + static_cast<int>(rng.next_u64() % static_cast<uint64_t>(n));
    std::vector<double> costs;
    for (int i = 0; i < n; ++i) costs.push_back(0.5 + rng.uniform());
    const double first = rng.uniform() * 2, last = rng.uniform() * 3;
    const auto parts = balanced_partition(costs, first, last, pp, 1);
    ASSERT_EQ(parts.size(), static_cast<size_t>(pp));
    int at = 0;
    for (const BlockRange& r : parts) {
      EXPECT_EQ(r.begin, at);
      EXPECT_GT(r.size(), 0);
      at = r.end;
    }
    EXPECT_EQ(at, n);
    EXPECT_NEAR(largest(parts, costs, first, last), brute_force(costs, first, last, pp), 1e-12);
  }
}

TEST(PipelinePartition, ErrorsNameTheKeys) {
  auto message = [](const std::function<void()>& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message([] { uniform_partition(6, 4, 1); })
                .find("n_layer 6 is not divisible by 4 pipeline stages (parallel."
                      "pipeline_parallel_size 4 x parallel.pipeline_virtual_stages 1); set "
                      "parallel.pipeline_balance: parameters or time"),
            std::string::npos);
  EXPECT_NE(message([] {
              uniform_partition(6, 4, 2);
            }).find("= 8 pipeline stages but the model has 6 layers (n_layer)"),
            std::string::npos);
  EXPECT_NE(message([] {
              balanced_partition(std::vector<double>(3, 1.0), 0, 0, 4, 1);
            }).find("every stage needs a block"),
            std::string::npos);
}

}  // namespace
}  // namespace braid::parallel::pipeline
