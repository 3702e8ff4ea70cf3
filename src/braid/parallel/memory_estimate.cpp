#include "braid/parallel/memory_estimate.h"

#include "braid/core/memory_tracker.h"

namespace braid::parallel {

std::vector<StateEstimate> estimate_training_state(int64_t params, int64_t largest_unit,
                                                   int ranks) {
  const int64_t P = 4 * params, N = ranks > 0 ? ranks : 1, in_flight = 2 * 4 * largest_unit;
  return {
      {"ddp", P, P, 2 * P},
      {"zero1", P, P, 2 * P / N},
      {"zero2", P, P / N + in_flight, 2 * P / N},
      {"zero3", P / N + in_flight, P / N + in_flight, 2 * P / N},
  };
}

std::string describe_estimates(const std::vector<StateEstimate>& estimates) {
  std::string s;
  for (const StateEstimate& e : estimates)
    s += (s.empty() ? "" : ", ") + e.strategy + " " + format_bytes(e.total());
  return s;
}

}  // namespace braid::parallel
