// The GEMM peak a run's MFU is measured against (Note [MFU peak]).
//
// Note [MFU peak]: one peak per run, the same for every progress line and the summary. Where this
// machine has a calibrated profile (`braid plan --calibrate`, parallel/cost/machine_profile.h)
// of the same CPU and cores, it is the profile's GEMM rate of large products for this many
// ranks on the node (measured on a quiet machine, the same from run to run, and the planner's
// denominator too); elsewhere (no profile, another CPU, a GPU) a GEMM timed at the start on
// every rank at once. A start measurement disturbed by other work is too low and inflates MFU:
// the end measures again, and when it is more than a quarter higher the summary says so beside
// the MFU, which stays against the start's peak. The end's check is made only when training
// took at least kEndCheckRatio times what the start's measurement took (a second or two), so a
// short run (a test, a smoke run) does not spend more on the check than it says about.
#pragma once

#include <string>

#include "braid/core/device.h"
#include "braid/core/dtype.h"

namespace braid::train {

struct MfuPeak {
  double gflops = 0;   // one rank's
  std::string source;  // "calibrated" or "measured"
  std::string engine;  // what ran the GEMMs: the CPU's GEMM library, or the device and its backend
  double seconds = 0;  // what measuring took (0 for a profile's)
};

// Note [MFU peak]: training time per second of measuring before the end checks the peak again.
inline constexpr double kEndCheckRatio = 40;

// This rank's peak for `dtype` GEMMs on `device` with `local_ranks` ranks on the node.
MfuPeak mfu_peak(Device device, DType dtype, int local_ranks);
// A GEMM timed now on the calling rank (what mfu_peak measures without a profile).
double measured_gemm_peak(Device device, DType dtype);

}  // namespace braid::train
