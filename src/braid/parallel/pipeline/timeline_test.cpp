// The pipeline timeline: the bubble of a step, the kept steps, and a Chrome trace file that a
// JSON parser reads.
#include "braid/parallel/pipeline/timeline.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "braid/core/error.h"

namespace braid::parallel::pipeline {
namespace {

TEST(PipelineTimeline, BubbleIsTheShareOfTheStepNotComputing) {
  Timeline t(0);
  t.begin_step(1);
  const double s = t.now_us();
  t.add(TimelineEvent::Kind::forward, 0, 0, s, s + 1000);
  t.add(TimelineEvent::Kind::idle, -1, -1, s + 1000, s + 3000);
  t.add(TimelineEvent::Kind::backward, 0, 0, s + 3000, s + 5000);
  while (t.now_us() < s + 10000) {
  }
  t.end_step();
  EXPECT_NEAR(t.last_compute_ms(), 3.0, 1e-9);
  EXPECT_GE(t.last_step_ms(), 10.0);
  EXPECT_NEAR(t.last_bubble(), 1.0 - 3.0 / t.last_step_ms(), 1e-12);
}

TEST(PipelineTimeline, KeepsTheLastStepsAndWritesATraceThatParses) {
  Timeline a(0, 2), b(1, 2);
  for (int64_t step = 1; step <= 3; ++step)
    for (Timeline* t : {&a, &b}) {
      t->begin_step(step);
      const double s = t->now_us();
      t->add(TimelineEvent::Kind::forward, 0, 1, s, s + 5);
      t->add(TimelineEvent::Kind::send, 0, -1, s + 5, s + 6);
      t->end_step();
    }
  const std::string events = a.chrome_events_json();
  EXPECT_EQ(events.find("\"step\":1,"), std::string::npos) << "step 1 was dropped";
  EXPECT_NE(events.find("\"step\":3,"), std::string::npos);
  EXPECT_NE(events.find("\"name\":\"F m0 c1\""), std::string::npos);
  const std::string path = ::testing::TempDir() + "braid_trace_test.json";
  write_chrome_trace(path, {events, b.chrome_events_json()});
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  EXPECT_NE(text.str().find("\"rank 1\""), std::string::npos);
  if (std::system("python3 -c 'pass' > /dev/null 2>&1") == 0) {
    const std::string cmd = "python3 -c \"import json,sys; d=json.load(open('" + path +
                            "')); sys.exit(0 if len(d['traceEvents']) == 10 else 1)\"";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << "the trace does not parse as JSON with 10 events";
  }
  EXPECT_THROW(write_chrome_trace("/no/such/dir/trace.json", {events}), Error);
}

}  // namespace
}  // namespace braid::parallel::pipeline
