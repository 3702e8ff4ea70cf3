#include "braid/parallel/pipeline/timeline.h"

#include <cstdio>
#include <fstream>

#include "braid/core/error.h"
#include "braid/parallel/pipeline/schedule.h"

namespace braid::parallel::pipeline {

namespace {

const char* kind_name(TimelineEvent::Kind k) {
  switch (k) {
    case TimelineEvent::Kind::forward:
      return "forward";
    case TimelineEvent::Kind::backward:
      return "backward";
    case TimelineEvent::Kind::weight:
      return "weight";
    case TimelineEvent::Kind::send:
      return "send";
    case TimelineEvent::Kind::recv:
      return "recv";
    case TimelineEvent::Kind::idle:
      return "idle";
    case TimelineEvent::Kind::optimizer:
      return "optimizer";
  }
  return "?";
}

bool is_compute(TimelineEvent::Kind k) {
  return k == TimelineEvent::Kind::forward || k == TimelineEvent::Kind::backward ||
         k == TimelineEvent::Kind::weight;
}

bool is_communication(TimelineEvent::Kind k) {
  return k == TimelineEvent::Kind::send || k == TimelineEvent::Kind::recv ||
         k == TimelineEvent::Kind::idle;
}

std::string trace_name(const TimelineEvent& e) {
  if (is_compute(e.kind))
    return action_name({e.kind == TimelineEvent::Kind::forward    ? Action::Kind::forward
                        : e.kind == TimelineEvent::Kind::backward ? Action::Kind::backward
                                                                  : Action::Kind::weight,
                        e.micro, e.chunk});
  return e.kind == TimelineEvent::Kind::idle ? "recv wait" : kind_name(e.kind);
}

}  // namespace

Timeline::Timeline(int rank, size_t max_steps)
    : rank_(rank), max_steps_(max_steps), origin_(std::chrono::steady_clock::now()) {
  BRAID_CHECK(max_steps >= 1, "Timeline: max_steps must be >= 1, got ", max_steps);
}

double Timeline::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_)
      .count();
}

void Timeline::begin_step(int64_t step) {
  steps_.push_back({step, now_us(), -1, {}});
  while (steps_.size() > max_steps_) steps_.pop_front();
}

void Timeline::add(TimelineEvent::Kind kind, int micro, int chunk, double start_us, double end_us) {
  BRAID_CHECK(!steps_.empty(), "Timeline: add() before begin_step()");
  steps_.back().events.push_back({kind, micro, chunk, start_us, end_us - start_us});
}

void Timeline::end_step() {
  BRAID_CHECK(!steps_.empty(), "Timeline: end_step() before begin_step()");
  steps_.back().end_us = now_us();
}

const Timeline::Step* Timeline::last_ended() const {
  for (auto it = steps_.rbegin(); it != steps_.rend(); ++it)
    if (it->end_us >= 0) return &*it;
  return nullptr;
}

std::string Timeline::last_step_json() const {
  const Step* s = last_ended();
  std::string out = "[";
  if (s)
    for (const TimelineEvent& e : s->events) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "%s[\"%s\",%d,%d,%.4f,%.4f]", out.size() > 1 ? "," : "",
                    kind_name(e.kind), e.micro, e.chunk, (e.start_us - s->start_us) / 1e3,
                    e.dur_us / 1e3);
      out += buf;
    }
  return out + "]";
}

double Timeline::last_step_ms() const {
  const Step* s = last_ended();
  return s ? (s->end_us - s->start_us) / 1e3 : 0;
}

double Timeline::last_compute_ms() const {
  const Step* s = last_ended();
  double us = 0;
  if (s)
    for (const TimelineEvent& e : s->events)
      if (is_compute(e.kind)) us += e.dur_us;
  return us / 1e3;
}

double Timeline::last_bubble() const {
  const double wall = last_step_ms();
  return wall > 0 ? 1.0 - last_compute_ms() / wall : 0;
}

std::string Timeline::chrome_events_json() const {
  std::string out;
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                "\"args\":{\"name\":\"rank %d\"}}",
                rank_, rank_);
  out += buf;
  for (const Step& s : steps_) {
    for (const TimelineEvent& e : s.events) {
      std::snprintf(buf, sizeof buf,
                    ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,"
                    "\"pid\":%d,\"tid\":%d,\"args\":{\"step\":%lld,\"micro\":%d,\"chunk\":%d}}",
                    trace_name(e).c_str(), kind_name(e.kind), e.start_us, e.dur_us, rank_,
                    is_communication(e.kind) ? 1 : 0, static_cast<long long>(s.step), e.micro,
                    e.chunk);
      out += buf;
    }
  }
  return out;
}

void write_chrome_trace(const std::filesystem::path& path,
                        const std::vector<std::string>& rank_events) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  bool written = false;
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (f) {
      f << "{\"traceEvents\":[\n";
      bool first = true;
      for (const std::string& events : rank_events) {
        if (events.empty()) continue;
        f << (first ? "" : ",\n") << events;
        first = false;
      }
      f << "\n],\"displayTimeUnit\":\"ms\"}\n";
      f.flush();
      written = f.good();
    }
  }
  std::error_code ec;
  if (written) std::filesystem::rename(tmp, path, ec);
  if (!written || ec) {
    const std::string why = written ? ec.message() : "cannot create or write " + tmp.string();
    std::filesystem::remove(tmp, ec);  // best effort: the error below is the one that matters
    BRAID_THROW("pipeline trace (parallel.pipeline_trace): cannot write ", path.string(), ": ",
                why);
  }
}

}  // namespace braid::parallel::pipeline
