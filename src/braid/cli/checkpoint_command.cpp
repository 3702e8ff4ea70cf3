// braid checkpoint inspect DIR | verify DIR | export DIR --out OUT
#include <cstdio>
#include <string>
#include <vector>

#include "braid/cli/command.h"
#include "braid/cli/command_line.h"
#include "braid/train/checkpoint_tools.h"

namespace {

int run_checkpoint(const std::vector<std::string>& args) {
  braid::cli::CommandLine cl(
      "checkpoint", "Inspects, verifies or exports a training checkpoint.",
      "DIR is a checkpoint (step-NNNNNNNN) or a checkpoint.dir (its newest checkpoint).");
  CLI::App& app = cl.app();
  std::string dir, out;
  CLI::App* inspect = app.add_subcommand("inspect", "list contents, layout and training state");
  CLI::App* verify = app.add_subcommand("verify", "check every file's size, header and CRC-32C");
  CLI::App* exporter = app.add_subcommand(
      "export",
      "write an HF model directory (safetensors + config.json) from the checkpoint's weights");
  for (CLI::App* action : {inspect, verify, exporter}) {
    action->add_option("DIR", dir, "the checkpoint")->required()->type_name("");
  }
  exporter->add_option("--out", out, "the model directory to write")->required()->type_name("OUT");
  cl.require_subcommand("checkpoint action");
  if (auto status = cl.parse(args)) return *status;
  const std::string text = *inspect  ? braid::train::inspect_checkpoint(dir)
                           : *verify ? braid::train::verify_checkpoint(dir)
                                     : braid::train::export_checkpoint(dir, out);
  std::printf("%s\n", text.c_str());
  return 0;
}

}  // namespace

BRAID_COMMAND("checkpoint", "inspect, verify or export a training checkpoint", run_checkpoint);
