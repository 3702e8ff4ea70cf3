#include "braid/launch/fault_plan.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "braid/core/error.h"

namespace braid::launch {

namespace {
const char* const kPoints[] = {"forward",      "backward",  "optimizer",     "save:create",
                               "save:write",   "save:sync", "save:manifest", "save:rename",
                               "save:publish", "nan"};

bool known_point(const std::string& p) {
  for (const char* k : kPoints)
    if (p == k) return true;
  return false;
}
}  // namespace

FaultPlan FaultPlan::parse(const std::string& text) {
  FaultPlan plan;
  std::istringstream in(text);
  for (std::string entry; std::getline(in, entry, ';');) {
    if (entry.empty()) continue;
    FaultPoint f;
    std::istringstream e(entry);
    char c1 = 0, c2 = 0, c3 = 0;
    const bool ok = static_cast<bool>(e >> f.attempt >> c1 >> f.rank >> c2 >> f.step >> c3) &&
                    c1 == ':' && c2 == ':' && c3 == ':' && std::getline(e, f.point) &&
                    known_point(f.point);
    BRAID_CHECK(
        ok, "BRAID_FAULT_PLAN: '", entry,
        "' is not ATTEMPT:RANK:STEP:POINT with POINT one of forward, backward, optimizer, nan, "
        "save:create, save:write, save:sync, save:manifest, save:rename, save:publish");
    plan.points_.push_back(f);
  }
  return plan;
}

FaultPlan FaultPlan::from_environment(int rank, int attempt) {
  const char* text = std::getenv("BRAID_FAULT_PLAN");
  FaultPlan all = parse(text ? text : "");
  FaultPlan mine;
  for (const FaultPoint& f : all.points_)
    if (f.rank == rank && f.attempt == attempt) mine.points_.push_back(f);
  return mine;
}

int launch_attempt() {
  const char* s = std::getenv("BRAID_RESTART_COUNT");
  return s ? std::atoi(s) : 0;
}

bool FaultPlan::has(int64_t step, const std::string& point) const {
  for (const FaultPoint& f : points_)
    if (f.step == step && f.point == point) return true;
  return false;
}

void FaultPlan::at(int64_t step, const std::string& point) const {
  for (const FaultPoint& f : points_) {
    if (f.step != step || f.point != point || point == "nan") continue;
    std::fprintf(stderr, "rank %d: BRAID_FAULT_PLAN: killing myself at step %lld, %s\n", f.rank,
                 static_cast<long long>(step), point.c_str());
    std::fflush(stderr);
    ::kill(::getpid(), SIGKILL);
  }
}

}  // namespace braid::launch
