// Timeline: what one rank did during each pipeline step (forward, backward and weight passes
// per micro-batch and chunk, sends, waits for receives, the optimizer), the step's bubble (the
// fraction of it spent on anything but forward, backward and weight passes), and the events as a
// Chrome trace (JSON that Perfetto and chrome://tracing open: one process per rank, compute on
// thread 0 and communication on thread 1). Times are microseconds since the timeline was built;
// each rank builds its own, so ranks line up as well as their constructions did.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <string>
#include <vector>

namespace braid::parallel::pipeline {

struct TimelineEvent {
  // idle: waiting for a receive (traced as "recv wait"); weight: a zero-bubble schedule's
  // weight-gradient pass (its backward is the input-gradient pass).
  enum class Kind : uint8_t { forward, backward, weight, send, recv, idle, optimizer };
  Kind kind = Kind::forward;
  int micro = -1;       // -1: none
  int chunk = -1;       // -1: none
  double start_us = 0;  // since the timeline's origin
  double dur_us = 0;
};

class Timeline {
 public:
  // max_steps: the steps kept for the trace (older ones are dropped).
  explicit Timeline(int rank, size_t max_steps = 64);

  double now_us() const;  // since construction
  // A step is its begin_step() and end_step() and the events added between; only ended steps
  // count as the last step.
  void begin_step(int64_t step);
  void add(TimelineEvent::Kind kind, int micro, int chunk, double start_us, double end_us);
  void end_step();

  // The last completed step: wall time, forward + backward (+ weight) time, bubble = 1 - compute
  // / wall.
  double last_step_ms() const;
  double last_compute_ms() const;
  double last_bubble() const;

  // The kept steps' events as comma-separated Chrome trace objects (no brackets): a
  // process_name metadata event "rank N", then one complete ("X") event per TimelineEvent named
  // "F m3 c0", "B m3 c1", "W m3 c1", "send", "recv", "recv wait" or "optimizer", with the step,
  // micro-batch and chunk in its args.
  std::string chrome_events_json() const;
  // The last completed step's events as a JSON array of [kind, micro, chunk, start_ms,
  // duration_ms], times from the step's start (kind: "forward", "backward", "weight", "send",
  // "recv", "idle" or "optimizer"); "[]" before the first.
  std::string last_step_json() const;

 private:
  struct Step {
    int64_t step = 0;
    double start_us = 0, end_us = -1;
    std::vector<TimelineEvent> events;
  };
  const Step* last_ended() const;  // null before the first end_step()

  int rank_;
  size_t max_steps_;
  std::chrono::steady_clock::time_point origin_;
  std::deque<Step> steps_;
};

// One Chrome trace file ({"traceEvents": [...], "displayTimeUnit": "ms"}) from every rank's
// chrome_events_json(), written to a temporary file and renamed; throws naming the path.
void write_chrome_trace(const std::filesystem::path& path,
                        const std::vector<std::string>& rank_events);

}  // namespace braid::parallel::pipeline
