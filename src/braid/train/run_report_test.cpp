// The metrics log a run leaves (Note [Metrics log]) and the report drawn from it: every logged
// step with every rank's step time and rank 0's memory by category, the validations, a
// pipeline's last step per rank; a resumed run replaces the steps it redoes; the page draws one
// curve per run and names a damaged line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "braid/checkpoint/file_io.h"
#include "braid/train/run_report.h"
#include "testing/train/checkpoint_test_util.h"

namespace braid::train {
namespace {

namespace fs = std::filesystem;

TrainerOptions logging() {
  TrainerOptions o = quiet();
  o.quiet = false;  // the metrics log is written by runs that report
  return o;
}

config::TrainConfig logged_run(const fs::path& dir) {
  config::TrainConfig c = resume_config((dir / "checkpoints").string());
  c.output.dir = dir.string();
  c.output.export_model = false;
  c.output.samples = 0;
  c.training.log_interval = 1;
  return c;
}

TEST(RunReport, TheMetricsLogHasEveryStepRankAndCategoryAndThePipelinesLastStep) {
  const fs::path dir = private_temp_dir("braid_metrics_pp");
  fs::remove_all(dir);
  config::TrainConfig c = logged_run(dir);
  c.parallel.pipeline_parallel_size = 2;
  c.parallel.sync_each_batch = "false";
  train_ranks(2, c, logging());
  const RunMetrics r = read_run_metrics(dir);
  EXPECT_EQ(r.world_size, 2);
  EXPECT_EQ(r.max_steps, 4);
  ASSERT_EQ(r.steps.size(), 4u);
  for (int64_t i = 0; i < 4; ++i) {
    const LoggedStep& s = r.steps[static_cast<size_t>(i)];
    EXPECT_EQ(s.step, i + 1);
    EXPECT_TRUE(std::isfinite(s.loss) && s.loss > 0);
    EXPECT_EQ(s.step_ms_ranks.size(), 2u);
    EXPECT_GE(s.bubble, 0);
    double params = -1;
    for (const auto& [category, bytes] : s.memory)
      if (category == "parameters") params = bytes;
    EXPECT_GT(params, 0);
  }
  EXPECT_EQ(r.evals.size(), 2u);  // eval_interval 2
  ASSERT_EQ(r.timeline.size(), 2u);
  for (const auto& rank : r.timeline) {
    int forwards = 0, backwards = 0;
    for (const LoggedEvent& e : rank) {
      forwards += e.kind == "forward";
      backwards += e.kind == "backward";
      EXPECT_GE(e.start_ms, 0);
    }
    EXPECT_EQ(forwards, 2);  // the 2 micro-batches of the last step
    EXPECT_EQ(backwards, 2);
  }
  EXPECT_GT(r.tokens_per_s, 0);
  EXPECT_GT(r.peak_tracked_bytes, 0);
}

TEST(RunReport, AResumedRunReplacesTheStepsItRedoes) {
  const fs::path dir = private_temp_dir("braid_metrics_resume");
  fs::remove_all(dir);
  config::TrainConfig c = logged_run(dir);
  c.parallel.strategy = "ddp";
  train_ranks(2, c, logging());
  roll_back_to(dir / "checkpoints", 2);
  train_ranks(2, c, logging());  // resumes at step 2
  const RunMetrics r = read_run_metrics(dir / "metrics.jsonl");
  ASSERT_EQ(r.steps.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(r.steps[i].step, static_cast<int64_t>(i + 1));
  EXPECT_EQ(r.evals.size(), 2u);
}

TEST(RunReport, ThePageDrawsEveryRunAndADamagedLineIsNamed) {
  const fs::path dir = private_temp_dir("braid_metrics_page");
  fs::remove_all(dir);
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b");
  for (const char* run : {"a", "b"})
    std::ofstream(dir / run / "metrics.jsonl")
        << R"({"kind":"run","model":"gpt2","layout":"ddp","world_size":2,"max_steps":2,"start_step":0})"
        << "\n"
        << R"({"kind":"step","step":1,"loss":5.5,"tokens_per_s":100,"mfu":0.1,"step_ms_ranks":[10,12],"memory":{"parameters":1000,"gradients":500}})"
        << "\n"
        << R"({"kind":"step","step":2,"loss":5.0,"tokens_per_s":120,"mfu":0.12,"step_ms_ranks":[9,11],"memory":{"parameters":1000,"gradients":400}})"
        << "\n"
        << R"({"kind":"eval","step":2,"val_loss":5.1})"
        << "\n";
  const std::string html = report_html({read_run_metrics(dir / "a"), read_run_metrics(dir / "b")});
  EXPECT_NE(html.find("<title>braid report: a, b</title>"), std::string::npos);
  size_t curves = 0;
  for (size_t at = html.find("class=\"series\""); at != std::string::npos;
       at = html.find("class=\"series\"", at + 1))
    ++curves;
  // Loss: 2 runs + 2 validations; throughput and MFU: 2 each; step-time spread: 2 per run.
  EXPECT_EQ(curves, 4u + 2u + 2u + 4u);
  EXPECT_NE(html.find("data-title=\"Memory by category, rank 0: a\""), std::string::npos);
  EXPECT_EQ(html.find("http"), html.find("http://www.w3.org/2000/svg"));  // nothing fetched

  std::ofstream(dir / "a" / "metrics.jsonl", std::ios::app) << "{\"kind\": \"step\", \"lo\n";
  try {
    read_run_metrics(dir / "a");
    ADD_FAILURE() << "a damaged line was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.jsonl:5: not a JSON object"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace braid::train
