// `braid report`: runs' metrics logs (Note [Metrics log], metrics_log.h) drawn as one
// self-contained HTML page (inline SVG, svg_chart.h; nothing fetched when it is viewed): a table
// of the runs, the training and validation loss of every run overlaid, throughput and MFU,
// memory by category over time (rank 0), the spread of step time over ranks, and a pipeline's
// last step.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace braid::train {

struct LoggedStep {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = -1, tokens_per_s = 0, mfu = 0, step_ms = 0;
  double exposed_comm_ms = 0, bubble = -1;
  std::vector<double> step_ms_ranks;
  std::vector<std::pair<std::string, double>> memory;  // category, bytes
};

struct LoggedEvent {
  std::string kind;  // Timeline's kinds
  int micro = -1, chunk = -1;
  double start_ms = 0, duration_ms = 0;
};

struct RunMetrics {
  std::string name;  // the run's directory
  std::string model, layout;
  int64_t world_size = 1;
  int64_t max_steps = 0;
  std::vector<LoggedStep> steps;
  std::vector<std::pair<int64_t, double>> evals;   // step, validation loss
  std::vector<std::vector<LoggedEvent>> timeline;  // a pipeline's last step, per rank
  // From the "end" line (NaN / -1 when the run did not end).
  double tokens_per_s = -1, step_ms = -1, mfu = -1;
  int64_t peak_tracked_bytes = -1;
};

// A run directory's metrics.jsonl (or the file itself). Lines of a run that was resumed from an
// earlier step replace the steps logged after it. Errors name the file and line.
RunMetrics read_run_metrics(const std::filesystem::path& run);

std::string report_html(const std::vector<RunMetrics>& runs);

}  // namespace braid::train
