// braid config [--config_file PATH]: `accelerate config`'s questions at the prompt; writes
// Accelerate's YAML (config/accelerate_questions.h).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "braid/cli/command.h"
#include "braid/cli/command_line.h"
#include "braid/config/accelerate_questions.h"
#include "braid/core/error.h"

namespace {

int run_config(const std::vector<std::string>& args) {
  std::string path = braid::config::default_accelerate_config_path();
  braid::cli::CommandLine cl(
      "config",
      "Asks what `accelerate config` asks (machine, processes, DeepSpeed or FSDP, precision) and "
      "writes the answers as an Accelerate config for braid launch --config_file PATH -- braid "
      "train x.yaml.");
  cl.app()
      .add_option("--config_file,--config-file", path, "where to write the config")
      ->type_name("PATH")
      ->capture_default_str();
  if (auto status = cl.parse(args)) return *status;
  const std::string yaml = braid::config::ask_accelerate_config(std::cin, std::cout);
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream out(path);
  BRAID_CHECK(out << yaml, "braid config: cannot write '", path, "'");
  std::printf("braid config: wrote %s\n", path.c_str());
  return 0;
}

}  // namespace

BRAID_COMMAND("config", "write an Accelerate config by answering accelerate config's questions",
              run_config);
