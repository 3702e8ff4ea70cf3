// braid train CONFIG.yaml [--deepspeed ds.json] [--set key=value ...] [--print-config]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "braid/cli/command.h"
#include "braid/config/accelerate_config.h"
#include "braid/core/error.h"
#include "braid/train/train_run.h"

namespace {

int run_train(const std::vector<std::string>& args) {
  std::string path;
  std::vector<std::string> sets;
  std::string deepspeed;
  // `braid launch --config_file acc.yaml` hands Accelerate's config to every rank.
  const char* handed = std::getenv(braid::config::kAccelerateConfigEnv);
  std::string accelerate = handed ? handed : "";
  bool dump = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: braid train CONFIG.yaml [--deepspeed DS.json | --accelerate-config ACC.yaml]\n"
          "                   [--set section.key=value ...] [--print-config]\n"
          "Trains as the config says; under `braid launch -n N` every rank runs this.\n"
          "  --deepspeed DS.json  a DeepSpeed config for the distribution (batch sizes, "
          "precision,\n"
          "                       ZeRO, optimizer, scheduler); its explicit values replace the\n"
          "                       YAML's, \"auto\" keeps them; --set applies last\n"
          "  --accelerate-config ACC.yaml  HF Accelerate's config (distributed_type, fsdp_config,\n"
          "                       deepspeed_config, mixed_precision), the same way\n"
          "  --print-config       print every key, resolved (and what DS.json became), and exit\n");
      return 0;
    } else if (a == "--set") {
      BRAID_CHECK(i + 1 < args.size(), "--set needs key=value");
      sets.push_back(args[++i]);
    } else if (a.rfind("--set=", 0) == 0) {
      sets.push_back(a.substr(6));
    } else if (a == "--deepspeed") {
      BRAID_CHECK(i + 1 < args.size(), "--deepspeed needs a DeepSpeed JSON file");
      deepspeed = args[++i];
    } else if (a == "--accelerate-config") {
      BRAID_CHECK(i + 1 < args.size(), "--accelerate-config needs an Accelerate YAML file");
      accelerate = args[++i];
    } else if (a == "--print-config") {
      dump = true;
    } else if (!a.empty() && a[0] == '-') {
      BRAID_THROW("unknown option '", a, "' (see braid train --help)");
    } else {
      BRAID_CHECK(path.empty(), "more than one config file given: '", path, "' and '", a, "'");
      path = a;
    }
  }
  BRAID_CHECK(!path.empty(), "missing CONFIG.yaml (usage: braid train CONFIG.yaml)");
  braid::train::run_training({path, deepspeed, accelerate, sets}, dump);
  return 0;
}

}  // namespace

BRAID_COMMAND("train", "train a model from a config (braid YAML)", run_train);
