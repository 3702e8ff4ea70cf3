// braid: one binary, many commands (cli/*_command.cpp). main reads only the command's name and
// hands the rest of the line to that command whole; each command parses its own arguments with
// CLI11 (command_line.h). Not one CLI11 app with the commands as its subcommands: CLI11 ends a
// subcommand at a `--` it has no positional for and goes on parsing in the parent, which would take
// braid launch's PROGRAM ARGS for braid's own. Every error ends here as one line on stderr and a
// non-zero exit.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "braid/cli/command.h"
#include "braid/cli/help_formatter.h"
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

namespace {

// `braid --help`: the commands and what each does, laid out as every command's own --help.
std::string help() {
  CLI::App app{
      "braid trains transformer language models (GPT-2 and LLaMA families) on one "
      "process or many.",
      "braid"};
  auto formatter = std::make_shared<braid::cli::HelpFormatter>("[ARGS...]");
  formatter->label("SUBCOMMAND", "COMMAND");
  app.formatter(formatter);
  app.set_help_flag("-h,--help", "print this help and exit");
  app.footer("Run 'braid <command> --help' for a command's options.");
  app.require_subcommand(1);
  for (const auto& c : braid::cli::commands())
    app.add_subcommand(c.name, c.summary)->group("Commands");
  return app.help();
}

}  // namespace

int main(int argc, char** argv) {
  braid::launch::tune_allocator();  // Note [Allocator tuning]
  // A write past the file size limit (ulimit -f) fails with EFBIG and becomes an error naming
  // the file, instead of SIGXFSZ killing the rank without a word.
  std::signal(SIGXFSZ, SIG_IGN);
  const std::string name = argc < 2 ? "" : argv[1];
  if (argc < 2 || name == "--help" || name == "-h") {
    std::fputs(help().c_str(), argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::vector<std::string> args(argv + 2, argv + argc);
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
  std::fprintf(stderr, "braid: unknown command '%s' (see braid --help)\n", name.c_str());
  return 2;
}
