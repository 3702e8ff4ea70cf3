// braid train CONFIG.yaml [--deepspeed ds.json] [--set key=value ...] [--print-config]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "braid/cli/command.h"
#include "braid/comm/world.h"
#include "braid/core/error.h"
#include "braid/train/accelerate_config.h"
#include "braid/train/config.h"
#include "braid/train/deepspeed_config.h"
#include "braid/train/fault_plan.h"
#include "braid/train/trainer.h"

namespace {

int run_train(const std::vector<std::string>& args) {
  std::string path;
  std::vector<std::string> sets;
  std::string deepspeed;
  // `braid launch --config_file acc.yaml` hands Accelerate's config to every rank.
  const char* handed = std::getenv(braid::train::kAccelerateConfigEnv);
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
  braid::train::TrainConfig cfg = braid::train::load_config(path);
  std::string dialect;
  BRAID_CHECK(deepspeed.empty() || accelerate.empty(), "--deepspeed and an Accelerate config (",
              accelerate,
              ") both given; an Accelerate config names its DeepSpeed file itself "
              "(deepspeed_config.deepspeed_config_file)");
  if (!deepspeed.empty() || !accelerate.empty()) {
    // DeepSpeed's batch arithmetic counts data-parallel ranks: the launched ones over tp x pp.
    const int64_t model_parallel =
        cfg.parallel.tensor_parallel_size * cfg.parallel.pipeline_parallel_size;
    const int64_t dp = std::max<int64_t>(1, braid::comm::launched_world_size()) /
                       std::max<int64_t>(1, model_parallel);
    dialect = !deepspeed.empty() ? braid::train::describe_dialect(
                                       deepspeed + " (DeepSpeed)",
                                       braid::train::load_deepspeed_config(cfg, deepspeed, dp))
                                 : braid::train::describe_dialect(
                                       accelerate + " (Accelerate)",
                                       braid::train::load_accelerate_config(cfg, accelerate, dp));
  }
  for (const auto& s : sets) braid::train::apply_override(cfg, s);
  if (dump) {
    std::printf("%s%s", dialect.c_str(), braid::train::dump_config(cfg).c_str());
    return 0;
  }
  braid::comm::ProcessGroupOptions po;
  po.timeout =
      std::chrono::milliseconds(static_cast<int64_t>(cfg.parallel.comm_timeout_s * 1000.0));
  po.debug = cfg.parallel.comm_debug;
  auto world = braid::comm::init_world(po);
  braid::train::TrainerOptions options;
  // Fault tests only (train/fault_plan.h): deaths at chosen points of chosen steps.
  auto plan = braid::train::FaultPlan::from_environment(world ? world->rank() : 0,
                                                        braid::train::launch_attempt());
  if (!plan.empty()) {
    options.fault = [plan](int64_t step, const std::string& point) { plan.at(step, point); };
    options.inject_nan = [plan](int64_t step) { return plan.has(step, "nan"); };
  }
  braid::train::Trainer trainer(cfg, world, options);
  trainer.run();
  return 0;
}

}  // namespace

BRAID_COMMAND("train", "train a model from a config (braid YAML)", run_train);
