#include "braid/kernels/cuda/op_profile.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <vector>

#include "braid/kernels/cuda/runtime.h"

namespace braid::kernels::cuda {

namespace {

struct Pending {
  const char* op;
  cudaEvent_t start, end;
  double host_ms;
};

struct OpTotals {
  long calls = 0;
  double gpu_ms = 0, host_ms = 0;
};

struct Profile {
  std::mutex mu;
  std::vector<Pending> pending;
  std::vector<cudaEvent_t> free_events;
  std::map<std::string, OpTotals> totals;

  cudaEvent_t event() {
    if (!free_events.empty()) {
      cudaEvent_t e = free_events.back();
      free_events.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    BRAID_CUDA_CHECK(cudaEventCreate(&e), "profile event");
    return e;
  }

  // Folds finished events into the totals (the caller holds mu).
  void drain() {
    for (Pending& p : pending) {
      BRAID_CUDA_CHECK(cudaEventSynchronize(p.end), "profile event");
      float ms = 0;
      BRAID_CUDA_CHECK(cudaEventElapsedTime(&ms, p.start, p.end), "profile event");
      OpTotals& t = totals[p.op];
      ++t.calls, t.gpu_ms += ms, t.host_ms += p.host_ms;
      free_events.push_back(p.start);
      free_events.push_back(p.end);
    }
    pending.clear();
  }
};

Profile& profile() {
  static Profile* p = new Profile;  // never destroyed: the report runs at exit
  return *p;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void report_at_exit() noexcept {
  try {
    std::fputs(profile_report().c_str(), stderr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "BRAID_CUDA_PROFILE: no report at exit: %s\n", e.what());
  }
}

}  // namespace

bool profiling() {
  static const bool on = [] {
    const char* s = std::getenv("BRAID_CUDA_PROFILE");
    return s && std::strcmp(s, "1") == 0;
  }();
  return on;
}

OpTimer::OpTimer(const char* op) {
  if (!profiling()) return;
  op_ = op;
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  cudaEvent_t e = p.event();
  BRAID_CUDA_CHECK(cudaEventRecord(e, stream()), "profile event");
  // The report reads events, so it must run before the CUDA runtime's own exit handler: atexit
  // runs handlers in reverse order, and the runtime registers its handler when it initialises,
  // which it has by now (a handler registered with the flag ran after it and found it unloaded).
  static const bool registered = std::atexit(report_at_exit) == 0;
  (void)registered;
  start_ = e;
  host_start_ = now_ms();
}

OpTimer::~OpTimer() {
  if (!op_) return;
  const double host = now_ms() - host_start_;
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  cudaEvent_t e = p.event();
  if (cudaEventRecord(e, stream()) != cudaSuccess) return;
  p.pending.push_back({op_, static_cast<cudaEvent_t>(start_), e, host});
  if (p.pending.size() >= 8192) p.drain();
}

void profile_reset() {
  if (!profiling()) return;
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  p.drain();
  p.totals.clear();
}

std::string profile_report(int steps) {
  if (!profiling()) return "";
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  p.drain();
  if (p.totals.empty()) return "";
  std::vector<std::pair<std::string, OpTotals>> rows(p.totals.begin(), p.totals.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.gpu_ms > b.second.gpu_ms; });
  double gpu = 0, host = 0;
  for (const auto& [name, t] : rows) gpu += t.gpu_ms, host += t.host_ms;
  // Ops nest (a linear backward holds its GEMMs' rows, the LM head its chunks'), so the total
  // counts nested time twice.
  std::string out = "BRAID_CUDA_PROFILE: op, calls, GPU ms, host ms (issue time)";
  if (steps > 0) out += ", GPU ms per step (" + std::to_string(steps) + " steps)";
  out += "\n";
  char line[256];
  auto row = [&](const std::string& name, const char* calls, double g, double h) {
    std::snprintf(line, sizeof line, "  %-32s %8s %10.2f %10.2f", name.c_str(), calls, g, h);
    out += line;
    if (steps > 0) {
      std::snprintf(line, sizeof line, " %8.3f", g / steps);
      out += line;
    }
    out += "\n";
  };
  for (const auto& [name, t] : rows)
    row(name, std::to_string(t.calls).c_str(), t.gpu_ms, t.host_ms);
  row("total (nested ops twice)", "", gpu, host);
  return out;
}

}  // namespace braid::kernels::cuda
