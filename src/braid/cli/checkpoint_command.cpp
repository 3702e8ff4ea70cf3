// braid checkpoint inspect DIR | verify DIR | export DIR --out OUT
#include <cstdio>
#include <string>
#include <vector>

#include "braid/cli/command.h"
#include "braid/core/error.h"
#include "braid/train/checkpoint_tools.h"

namespace {

int run_checkpoint(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::printf(
        "usage: braid checkpoint inspect DIR      list contents, layout and training state\n"
        "       braid checkpoint verify DIR       check every file's size, header and CRC-32C\n"
        "       braid checkpoint export DIR --out OUT\n"
        "                                         write an HF model directory (safetensors +\n"
        "                                         config.json) from the checkpoint's weights\n"
        "DIR is a checkpoint (step-NNNNNNNN) or a checkpoint.dir (its newest checkpoint).\n");
    return args.empty() ? 2 : 0;
  }
  const std::string& what = args[0];
  BRAID_CHECK(args.size() >= 2, "checkpoint ", what, " needs a DIR (see braid checkpoint --help)");
  const std::string& dir = args[1];
  if (what == "inspect" || what == "verify") {
    BRAID_CHECK(args.size() == 2, "unexpected argument '", args[2], "'");
    const std::string text = what == "inspect" ? braid::train::inspect_checkpoint(dir)
                                               : braid::train::verify_checkpoint(dir);
    std::printf("%s\n", text.c_str());
    return 0;
  }
  BRAID_CHECK(what == "export", "unknown checkpoint action '", what,
              "' (inspect, verify or export)");
  std::string out;
  for (size_t i = 2; i < args.size(); ++i) {
    BRAID_CHECK(args[i] == "--out" && i + 1 < args.size(), "unexpected argument '", args[i],
                "' (export takes --out OUT)");
    out = args[++i];
  }
  BRAID_CHECK(!out.empty(), "checkpoint export needs --out OUT (the model directory to write)");
  std::printf("%s\n", braid::train::export_checkpoint(dir, out).c_str());
  return 0;
}

}  // namespace

BRAID_COMMAND("checkpoint", "inspect, verify or export a training checkpoint", run_checkpoint);
