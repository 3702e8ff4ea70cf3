// Progress reporting for training: throughput, MFU and ETA, printed as one updating line on a
// terminal and as plain lines otherwise. Only rank 0 prints; the numbers it prints are
// already reduced over ranks by the trainer.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace braid::train {

struct StepStats {
  int64_t step = 0;
  int64_t max_steps = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = -1;  // < 0: not computed
  double tokens_per_s = 0;
  double mfu = 0;  // fraction of peak
  double step_ms = 0;
  double bubble = -1;  // pipeline: mean idle fraction of the ranks (< 0: none)
  // Offload: this rank's file traffic in the step and the time the file had a transfer in
  // flight (0: none).
  int64_t offload_read_bytes = 0, offload_written_bytes = 0;
  double offload_busy_ms = 0;
};

class Progress {
 public:
  // Updates one line in place only on a terminal of our own: under mpirun/srun stdout is a
  // pty shared through the launcher, which tags whole lines, so launched runs print lines.
  Progress(bool is_printer, bool launched, FILE* out = stdout);
  void header(const std::string& text);
  void step(const StepStats& s, bool force_line);
  void message(const std::string& text);  // a full line (ends any in-place line first)

 private:
  bool printer_;
  bool tty_;
  FILE* out_;
  bool line_open_ = false;
  std::chrono::steady_clock::time_point start_;
};

std::string format_eta(double seconds);  // "1h02m", "3m05s", "12s"

}  // namespace braid::train
