// FaultPlan: deliberate deaths for fault tests (the kill loop of bit-identical restart), read
// from BRAID_FAULT_PLAN. Each entry "ATTEMPT:RANK:STEP:POINT" makes rank RANK of launch attempt
// ATTEMPT (BRAID_RESTART_COUNT, set by `braid launch`; 0 without it) SIGKILL itself when it
// reaches POINT of step STEP (1-based, the step being taken, or the step being saved):
//   forward, backward   micro-step 0's forward / backward pass
//   optimizer           the optimizer step
//   save:create ... save:publish   a checkpoint save's stages (checkpoint::SaveRequest::fault)
//   nan                 not a death: the rank's first micro-batch of STEP carries a NaN
//                       (TrainerOptions::inject_nan), for the non-finite report
// Entries are separated by ';'. A SIGKILL runs no handler, flushes nothing and frees nothing,
// the same death as the OOM killer's or a lost node's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace braid::launch {

struct FaultPoint {
  int attempt = 0;
  int rank = 0;
  int64_t step = 0;
  std::string point;
};

class FaultPlan {
 public:
  // Parses a plan; throws an Error naming the bad entry.
  static FaultPlan parse(const std::string& text);
  // The entries of BRAID_FAULT_PLAN for this rank in this launch attempt (empty when unset).
  static FaultPlan from_environment(int rank, int attempt);

  bool empty() const { return points_.empty(); }
  // Kills this process if the plan has an entry for this step and point (other than nan).
  void at(int64_t step, const std::string& point) const;
  bool has(int64_t step, const std::string& point) const;
  const std::vector<FaultPoint>& points() const { return points_; }

 private:
  std::vector<FaultPoint> points_;
};

// The launch attempt this process belongs to (BRAID_RESTART_COUNT; 0 when unset).
int launch_attempt();

}  // namespace braid::launch
