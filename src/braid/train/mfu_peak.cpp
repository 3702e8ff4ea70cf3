#include "braid/train/mfu_peak.h"

#include <chrono>
#include <thread>

#include "braid/core/device_backend.h"
#include "braid/core/error.h"
#include "braid/kernels/ops.h"
#include "braid/parallel/cost/machine_profile.h"

namespace braid::train {

double measured_gemm_peak(Device device, DType dtype) {
  return kernels::measure_gemm_peak_gflops(device.is_cpu() ? 2048 : 8192, dtype, device);
}

MfuPeak mfu_peak(Device device, DType dtype, int local_ranks) {
  if (device.is_cpu()) {
    try {
      const auto p = parallel::cost::load_profile(parallel::cost::default_profile_path());
      const int cores = static_cast<int>(std::thread::hardware_concurrency());
      if (p.device == "cpu" && p.cpu == parallel::cost::cpu_model_name() && p.cores == cores) {
        // f16 GEMMs run as f32 ones on widened copies (Note [f16 GEMM]).
        const auto rates = p.compute_at(std::max(1, local_ranks));
        return {rates.gemm_gflops(dtype == DType::bf16 ? DType::bf16 : DType::f32), "calibrated",
                kernels::gemm_backend_name()};
      }
    } catch (const Error&) {
      // No usable profile: measure.
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  const double gflops = measured_gemm_peak(device, dtype);
  const std::string engine = device.is_cpu() ? std::string(kernels::gemm_backend_name())
                                             : std::string(require_device_backend(device).name()) +
                                                   " backend on " + device.str();
  return {gflops, "measured", engine,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

}  // namespace braid::train
