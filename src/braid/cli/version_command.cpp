#include <cstdio>

#include "braid/cli/command.h"

namespace {
int run_version(const std::vector<std::string>&) {
  std::printf("braid 0.1.0\n");
  return 0;
}
}  // namespace

BRAID_COMMAND("version", "print braid's version", run_version);
