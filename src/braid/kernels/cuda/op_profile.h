// Per-op GPU time (BRAID_CUDA_PROFILE=1): every kernels/ops.h call that dispatches to the CUDA
// backend is bracketed by two CUDA events on braid's stream, and the host time spent issuing it
// is taken too. At exit (or profile_report()) a table lists each op's calls, GPU milliseconds
// and host milliseconds, slowest first. Off, an OpTimer is one branch on a static flag.
#pragma once

#include <string>

namespace braid::kernels::cuda {

bool profiling();

class OpTimer {
 public:
  explicit OpTimer(const char* op);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  const char* op_ = nullptr;  // null when not profiling
  void* start_ = nullptr;
  double host_start_ = 0;
};

// The table so far (synchronises the device); "" when not profiling or nothing was timed. With
// steps > 0 a column gives GPU milliseconds per step too.
std::string profile_report(int steps = 0);

// Forgets what was timed so far (synchronises the device): a benchmark calls it after its
// warm-up steps, whose first calls include cuBLASLt's plans and the allocator's cudaMallocs.
void profile_reset();

}  // namespace braid::kernels::cuda
