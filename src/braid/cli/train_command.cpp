// braid train CONFIG.yaml [--deepspeed DS.json | --accelerate-config ACC.yaml]
//                         [--set KEY=VALUE]... [--print-config] [--profile] [--plan]
#include <string>
#include <vector>

#include "braid/cli/command.h"
#include "braid/cli/command_line.h"
#include "braid/cli/option_values.h"
#include "braid/config/accelerate_config.h"
#include "braid/train/train_run.h"

namespace {

int run_train(const std::vector<std::string>& args) {
  braid::cli::CommandLine cl(
      "train", "Trains as the config says; under `braid launch -n N` every rank runs this.");
  CLI::App& app = cl.app();
  braid::train::RunConfigSources sources;
  bool print_config = false;
  app.add_option("CONFIG.yaml", sources.yaml, "the braid config (configs/, docs/config.md)")
      ->required()
      ->type_name("");
  app.add_option("--deepspeed", sources.deepspeed,
                 "a DeepSpeed config for the distribution (batch sizes, precision, ZeRO, "
                 "optimizer, scheduler); its explicit values replace the YAML's, \"auto\" keeps "
                 "them; --set applies last")
      ->type_name("DS.json");
  // `braid launch --config_file ACC.yaml` hands the file to every rank through the environment.
  app.add_option("--accelerate-config", sources.accelerate,
                 "HF Accelerate's config (distributed_type, fsdp_config, deepspeed_config, "
                 "mixed_precision), the same way; braid launch --config_file sets it")
      ->type_name("ACC.yaml")
      ->envname(braid::config::kAccelerateConfigEnv);
  braid::cli::repeatable(app.add_option("--set", sources.overrides,
                                        "set one config key, after the files (repeatable), e.g. "
                                        "--set training.max_steps=100")
                             ->type_name("KEY=VALUE"));
  app.add_flag("--print-config", print_config,
               "print every key, resolved (and what DS.json or ACC.yaml became), and exit");
  bool profile = false;
  app.add_flag("--profile", profile,
               "where each step's time goes, beside the step-time model's prediction for the "
               "layout (output.profile; predictions need `braid plan --calibrate` first)");
  bool plan = false;
  app.add_flag("--plan", plan,
               "choose the layout with the planner (parallel.strategy: auto; needs `braid plan "
               "--calibrate` once and training.global_batch_size)");
  if (auto status = cl.parse(args)) return *status;
  if (profile) sources.overrides.push_back("output.profile=true");
  if (plan) sources.overrides.push_back("parallel.strategy=auto");
  braid::train::run_training(sources, print_config);
  return 0;
}

}  // namespace

BRAID_COMMAND("train", "train a model from a config (braid YAML)", run_train);
