#include <cstdio>
#include <string>
#include <vector>

#include "braid/cli/command.h"
#include "braid/cli/command_line.h"

namespace {
int run_version(const std::vector<std::string>& args) {
  braid::cli::CommandLine cl("version", "Prints braid's version.");
  if (auto status = cl.parse(args)) return *status;
  std::printf("braid 0.1.0\n");
  return 0;
}
}  // namespace

BRAID_COMMAND("version", "print braid's version", run_version);
