#include "braid/parallel/pipeline/partition.h"

#include <algorithm>
#include <limits>

#include "braid/core/error.h"

namespace braid::parallel::pipeline {

namespace {

void check_enough_blocks(int n_layer, int pp, int v) {
  BRAID_CHECK(pp >= 1 && v >= 1, "pipeline: parallel.pipeline_parallel_size ", pp,
              " and parallel.pipeline_virtual_stages ", v, " must be >= 1");
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

std::vector<BlockRange> balanced_partition(const std::vector<double>& costs, double first_extra,
                                           double last_extra, int pp, int v) {
  const int n = static_cast<int>(costs.size());
  check_enough_blocks(n, pp, v);
  const int parts = pp * v;
  std::vector<double> prefix(static_cast<size_t>(n) + 1, 0);
  for (int i = 0; i < n; ++i) prefix[static_cast<size_t>(i) + 1] = prefix[i] + costs[i];
  auto cost = [&](int k, int b, int e) {
    return prefix[static_cast<size_t>(e)] - prefix[static_cast<size_t>(b)] +
           (k == 0 ? first_extra : 0) + (k == parts - 1 ? last_extra : 0);
  };
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[k][i]: the smallest largest cost of stages 0..k-1 over blocks [0, i); cut[k][i]: where
  // stage k - 1 starts in it.
  std::vector<std::vector<double>> best(parts + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<int>> cut(parts + 1, std::vector<int>(n + 1, -1));
  best[0][0] = 0;
  for (int k = 1; k <= parts; ++k)
    for (int i = k; i <= n - (parts - k); ++i)
      for (int j = k - 1; j < i; ++j) {
        if (best[k - 1][j] == kInf) continue;
        const double c = std::max(best[k - 1][j], cost(k - 1, j, i));
        if (c < best[k][i]) {  // strict: the earliest cut wins ties
          best[k][i] = c;
          cut[k][i] = j;
        }
      }
  std::vector<BlockRange> out(static_cast<size_t>(parts));
  for (int k = parts, i = n; k > 0; --k) {
    const int j = cut[k][i];
    out[static_cast<size_t>(k - 1)] = {j, i};
    i = j;
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
