// The pipeline timeline: the bubble of a step, the kept steps, and a Chrome trace file that a
// JSON parser reads.
#include "braid/parallel/pipeline/timeline.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "braid/core/error.h"
#include "testing/run_ranks.h"

namespace braid::parallel::pipeline {
namespace {

using Kind = TimelineEvent::Kind;

std::string read(const std::filesystem::path& path) {
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  return text.str();
}

// Braces and brackets outside strings pair up (the trace has no escapes in its strings).
bool balanced(const std::string& json) {
  std::string open;
  bool in_string = false;
  for (char c : json) {
    if (c == '"') in_string = !in_string;
    if (in_string) continue;
    if (c == '{' || c == '[') open += c;
    if (c == '}' || c == ']') {
      if (open.empty() || open.back() != (c == '}' ? '{' : '[')) return false;
      open.pop_back();
    }
  }
  return open.empty() && !in_string;
}

using braid::testing::error_of;

TEST(PipelineTimeline, BubbleIsTheShareOfTheStepNotComputing) {
  Timeline t(0);
  EXPECT_EQ(t.last_bubble(), 0);  // no step yet
  t.begin_step(1);
  const double s = t.now_us();
  t.add(Kind::forward, 0, 0, s, s + 1000);
  t.add(Kind::idle, -1, -1, s + 1000, s + 3000);
  t.add(Kind::send, 0, -1, s + 3000, s + 3100);
  t.add(Kind::backward, 0, 0, s + 3100, s + 5100);
  t.add(Kind::optimizer, -1, -1, s + 5100, s + 6000);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  t.end_step();
  EXPECT_NEAR(t.last_compute_ms(), 3.0, 1e-9);  // forward and backward only
  EXPECT_GE(t.last_step_ms(), 10.0);
  EXPECT_NEAR(t.last_bubble(), 1.0 - 3.0 / t.last_step_ms(), 1e-12);
  // A step not yet ended is not the last step.
  const double wall = t.last_step_ms();
  t.begin_step(2);
  t.add(Kind::forward, 0, 0, t.now_us(), t.now_us() + 50);
  EXPECT_EQ(t.last_step_ms(), wall);
  EXPECT_NEAR(t.last_compute_ms(), 3.0, 1e-9);
}

TEST(PipelineTimeline, KeepsTheLastSteps) {
  Timeline t(0, 2);
  for (int64_t step = 1; step <= 3; ++step) {
    t.begin_step(step);
    t.add(Kind::forward, 0, 0, t.now_us(), t.now_us() + 5);
    t.end_step();
  }
  const std::string events = t.chrome_events_json();
  EXPECT_EQ(events.find("\"step\":1,"), std::string::npos) << "step 1 was dropped";
  EXPECT_NE(events.find("\"step\":2,"), std::string::npos);
  EXPECT_NE(events.find("\"step\":3,"), std::string::npos);
  EXPECT_THROW(Timeline(0, 0), Error);
}

TEST(PipelineTimeline, ChromeTraceParses) {
  Timeline a(0), b(1);
  for (int64_t step = 1; step <= 2; ++step)
    for (Timeline* t : {&a, &b}) {
      t->begin_step(step);
      const double s = t->now_us();
      t->add(Kind::forward, 3, 1, s, s + 5);
      t->add(Kind::idle, -1, -1, s + 5, s + 7);
      t->add(Kind::backward, 3, 1, s + 7, s + 17);
      t->add(Kind::send, 3, -1, s + 17, s + 18);
      t->end_step();
    }
  const std::string events = a.chrome_events_json();
  for (const char* part :
       {"\"name\":\"F m3 c1\",\"cat\":\"forward\",\"ph\":\"X\"", "\"name\":\"B m3 c1\"",
        "\"name\":\"recv wait\",\"cat\":\"idle\"", "\"name\":\"send\",\"cat\":\"send\"",
        "\"args\":{\"step\":2,\"micro\":3,\"chunk\":1}", "\"tid\":1", "\"tid\":0",
        "\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"rank 0\"}"})
    EXPECT_NE(events.find(part), std::string::npos) << part << " in\n" << events;

  const std::filesystem::path path =
      std::filesystem::path(::testing::TempDir()) / "braid_pipeline_trace_test.json";
  write_chrome_trace(path, {events, "", b.chrome_events_json()});  // a rank with no events
  const std::string text = read(path);
  EXPECT_TRUE(balanced(text)) << text;
  EXPECT_EQ(text.rfind("{\"traceEvents\":[", 0), 0u);
  EXPECT_NE(text.find("\"displayTimeUnit\":\"ms\""), std::string::npos);
  EXPECT_NE(text.find("\"rank 0\""), std::string::npos);
  EXPECT_NE(text.find("\"rank 1\""), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
  if (std::system("python3 -c pass > /dev/null 2>&1") == 0) {
    // 2 ranks x (1 process name + 2 steps x 4 events).
    const std::string cmd = "python3 -c \"import json, sys; d = json.load(open('" + path.string() +
                            "')); sys.exit(len(d['traceEvents']) != 18)\"";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << "python3 does not read 18 events from " << text;
  }
  std::filesystem::remove(path);
}

TEST(PipelineTimeline, UnwritablePathNamesIt) {
  EXPECT_EQ(error_of([] { write_chrome_trace("/no/such/dir/trace.json", {"{}"}); }),
            "pipeline trace (parallel.pipeline_trace): cannot write /no/such/dir/trace.json: "
            "cannot create or write /no/such/dir/trace.json.tmp");
  // A directory in the way: the temporary file is written, the rename fails and is cleaned up.
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "braid_pipeline_trace_dir.json";
  std::filesystem::create_directories(dir / "inside");
  EXPECT_NE(error_of([&] {
              write_chrome_trace(dir, {"{}"});
            }).find("cannot write " + dir.string() + ": "),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir.string() + ".tmp"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace braid::parallel::pipeline
