// MetricsLog: a run's metrics as JSON lines, <output.dir>/metrics.jsonl, written by rank 0 and
// read back by `braid report` (run_report.h).
//
// Note [Metrics log]: one JSON object per line, each with a "kind":
//   "run"       at the start of each run (a resumed run appends to the file): time, model,
//               layout, world_size, max_steps, start_step, tokens_per_step, peak_gflops;
//   "step"      per logged step: step, loss, lr, grad_norm, tokens_per_s, mfu, step_ms,
//               step_ms_ranks (every rank's time for the step), exposed_comm_ms, bubble,
//               skipped_steps (so far), memory (rank 0's bytes by category at the end of the
//               step) and memory_peak (rank 0's peak of the total so far);
//   "eval"      step, val_loss;
//   "timeline"  a pipeline's last step: ranks, each a list of [kind, micro, chunk, start_ms,
//               duration_ms] from the step's start;
//   "end"       the run's summary: steps, tokens_per_s, step_ms, mfu, exposed_comm_ms, bubble,
//               peak_tracked_bytes, checkpoints_saved, skipped_steps.
// Each line is flushed as it is written, so a run that dies leaves every line before it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace braid::train {

// One line under construction: fields in the order added.
class MetricsLine {
 public:
  explicit MetricsLine(const std::string& kind);
  MetricsLine& add(const std::string& key, double v);  // non-finite: null
  MetricsLine& add(const std::string& key, int64_t v);
  MetricsLine& add(const std::string& key, const std::string& v);
  MetricsLine& add(const std::string& key, const std::vector<double>& v);
  MetricsLine& add_json(const std::string& key, const std::string& json);  // already JSON
  std::string str() const { return text_ + "}"; }

 private:
  std::string text_;
};

std::string json_quote(const std::string& s);  // a JSON string literal

class MetricsLog {
 public:
  // Opens `path` (truncated for a run from step 0, appended to when resuming), creating its
  // directory; throws naming the path when it cannot.
  MetricsLog(const std::filesystem::path& path, bool append);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void write(const MetricsLine& line);  // one line, flushed; throws naming the path on failure
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  FILE* file_ = nullptr;
};

}  // namespace braid::train
