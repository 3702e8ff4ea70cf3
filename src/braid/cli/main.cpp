// braid: one binary, many subcommands (cli/*_command.cpp). Every error ends here as one line
// on stderr and a non-zero exit.
#include <csignal>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "braid/cli/command.h"
#include "braid/core/error.h"
#include "braid/launch/process_setup.h"

namespace braid::cli {

namespace {
std::vector<Command>& table() {
  static std::vector<Command> t;
  return t;
}
}  // namespace

bool register_command(const Command& c) {
  table().push_back(c);
  return true;
}
const std::vector<Command>& commands() {
  return table();
}

}  // namespace braid::cli

static void usage(FILE* f) {
  std::fprintf(f, "usage: braid <command> [args...]\n\ncommands:\n");
  for (const auto& c : braid::cli::commands()) std::fprintf(f, "  %-16s %s\n", c.name, c.summary);
  std::fprintf(f, "\nRun 'braid <command> --help' for a command's options.\n");
}

int main(int argc, char** argv) {
  braid::launch::tune_allocator();  // Note [Allocator tuning]
  // A write past the file size limit (ulimit -f) fails with EFBIG and becomes an error naming
  // the file, instead of SIGXFSZ killing the rank without a word.
  std::signal(SIGXFSZ, SIG_IGN);
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string name = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const auto& c : braid::cli::commands()) {
    if (name != c.name) continue;
    try {
      return c.run(args);
    } catch (const braid::ReportedError&) {
      return 1;  // printed where it happened
    } catch (const std::exception& e) {
      std::fprintf(stderr, "braid %s: error: %s\n", c.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "braid: unknown command '%s'\n", name.c_str());
  usage(stderr);
  return 2;
}
