// braid report: runs' metrics logs drawn as one self-contained HTML page (train/run_report.h).
#include <cstdio>
#include <string>
#include <vector>

#include "braid/checkpoint/file_io.h"
#include "braid/cli/command.h"
#include "braid/cli/command_line.h"
#include "braid/train/run_report.h"

namespace {
int run_report(const std::vector<std::string>& args) {
  braid::cli::CommandLine cl(
      "report",
      "Draws runs as one HTML page that needs nothing else to open: the loss and validation "
      "curves of every RUN overlaid, throughput and MFU, memory by category, the spread of step "
      "time over ranks and a pipeline's last step. RUN is a run's output.dir (its "
      "metrics.jsonl) or the file itself.");
  CLI::App& app = cl.app();
  std::vector<std::string> runs;
  std::string out = "report.html";
  app.add_option("RUN", runs, "run directories (output.dir) or metrics.jsonl files")
      ->required()
      ->type_name("");
  app.add_option("--out,-o", out, "the page to write")->type_name("FILE")->capture_default_str();
  if (auto status = cl.parse(args)) return *status;
  std::vector<braid::train::RunMetrics> metrics;
  for (const std::string& r : runs) metrics.push_back(braid::train::read_run_metrics(r));
  braid::checkpoint::write_file_atomically(out, braid::train::report_html(metrics));
  std::printf("wrote %s (%zu run(s))\n", out.c_str(), metrics.size());
  return 0;
}
}  // namespace

BRAID_COMMAND("report", "draw runs' metrics as one HTML page", run_report);
