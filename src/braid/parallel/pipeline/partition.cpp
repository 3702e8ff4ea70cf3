#include "braid/parallel/pipeline/partition.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "braid/core/error.h"

namespace braid::parallel::pipeline {

namespace {

void check_enough_blocks(int n_layer, int pp, int v) {
  BRAID_CHECK(pp >= 1, "parallel.pipeline_parallel_size must be >= 1, got ", pp);
  BRAID_CHECK(v >= 1, "parallel.pipeline_virtual_stages must be >= 1, got ", v);
  BRAID_CHECK(pp * v <= n_layer, "parallel.pipeline_parallel_size ", pp,
              " x parallel.pipeline_virtual_stages ", v, " = ", pp * v,
              " pipeline stages but the model has ", n_layer,
              " layers (n_layer): every stage needs a block");
}

}  // namespace

std::vector<BlockRange> uniform_partition(int n_layer, int pp, int v) {
  check_enough_blocks(n_layer, pp, v);
  const int parts = pp * v;
  BRAID_CHECK(n_layer % parts == 0, "n_layer ", n_layer, " is not divisible by ", parts,
              " pipeline stages (parallel.pipeline_parallel_size ", pp,
              " x parallel.pipeline_virtual_stages ", v,
              "); set parallel.pipeline_balance: parameters or time for uneven stages");
  std::vector<BlockRange> out;
  const int each = n_layer / parts;
  for (int k = 0; k < parts; ++k) out.push_back({k * each, (k + 1) * each});
  return out;
}

std::vector<BlockRange> balanced_partition(const std::vector<double>& block_costs,
                                           double first_extra, double last_extra, int pp, int v) {
  const int n = static_cast<int>(block_costs.size());
  check_enough_blocks(n, pp, v);
  for (size_t i = 0; i < block_costs.size(); ++i) {
    const double c = block_costs[i];
    BRAID_CHECK(std::isfinite(c) && c >= 0, "parallel.pipeline_balance: block ", i, " has cost ", c,
                ", expected a finite cost >= 0");
  }
  BRAID_CHECK(std::isfinite(first_extra) && first_extra >= 0 && std::isfinite(last_extra) &&
                  last_extra >= 0,
              "parallel.pipeline_balance: embedding cost ", first_extra, " and head cost ",
              last_extra, " must be finite and >= 0");
  const int parts = pp * v;
  std::vector<double> prefix(static_cast<size_t>(n) + 1, 0);
  for (size_t i = 0; i < block_costs.size(); ++i) prefix[i + 1] = prefix[i] + block_costs[i];
  // Stage k over blocks [b, e).
  auto cost = [&](int k, int b, int e) {
    return prefix[static_cast<size_t>(e)] - prefix[static_cast<size_t>(b)] +
           (k == 0 ? first_extra : 0) + (k == parts - 1 ? last_extra : 0);
  };
  // tail[k][b]: the smallest largest cost of stages k..parts-1 over blocks [b, n), each stage
  // non-empty (infinite where that cannot be).
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> tail(static_cast<size_t>(parts) + 1,
                                        std::vector<double>(static_cast<size_t>(n) + 1, kInf));
  auto at = [&](int k, int b) -> double& {
    return tail[static_cast<size_t>(k)][static_cast<size_t>(b)];
  };
  at(parts, n) = 0;
  // Stage k over [b, e) followed by the best split of [e, n); the last stage ends at n.
  auto with_tail = [&](int k, int b, int e) { return std::max(cost(k, b, e), at(k + 1, e)); };
  for (int k = parts - 1; k >= 0; --k)
    for (int b = k; b <= n - (parts - k); ++b)
      for (int e = b + 1; e <= n - (parts - k - 1); ++e)
        at(k, b) = std::min(at(k, b), with_tail(k, b, e));
  // From the first stage on, the earliest end that keeps the optimum of the stages from here on
  // (Note [Balanced ties]); the comparison is exact, at() is the minimum of the same sums.
  std::vector<BlockRange> out;
  for (int k = 0, b = 0; k < parts; ++k) {
    int e = b + 1;
    while (e < n - (parts - k - 1) && with_tail(k, b, e) > at(k, b)) ++e;
    out.push_back({b, e});
    b = e;
  }
  return out;
}

std::string describe_partition(const std::vector<BlockRange>& parts) {
  std::string s;
  for (const BlockRange& r : parts)
    s += (s.empty() ? "[" : " [") + std::to_string(r.begin) + "," + std::to_string(r.end) + ")";
  return s;
}

}  // namespace braid::parallel::pipeline
