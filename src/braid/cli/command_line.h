// CommandLine: one braid command's arguments (those after `braid <command>`, main.cpp), parsed by
// CLI11 with braid's conventions. A command declares its options on app(), bound to its own
// variables, then calls parse():
//   - `-h`, `--help` prints the command's help (help_formatter.h) to stdout; parse() returns 0,
//     the command's exit status;
//   - a bad command line throws one braid::Error naming the option and what is wrong, ending in
//     "(see braid <command> --help)"; main prints it as "braid <command>: error: ..." and exits 1.
//     CLI11 never prints its usage on an error;
//   - an unknown option or a stray word is reported first, and alone ("unknown option '--sett'"):
//     CLI11 would list every unexpected word, last first, and the other errors (a value missing
//     because a misspelt option took it) usually follow from it;
//   - an option given twice keeps its last value, as braid's always did (CLI11 would refuse the
//     second); an option marked repeatable() keeps every value (option_values.h);
//   - `--` ends the options: what follows fills the positionals (`braid train -- -odd-name.yaml`),
//     or, in a pass_through() command, is handed over untouched (braid launch's PROGRAM ARGS...).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

namespace braid::cli {

class CommandLine {
 public:
  // `braid <command>`: the description says what it does (the help's first paragraph), the footer
  // holds the notes after the options. usage_tail: see HelpFormatter.
  CommandLine(const std::string& command, const std::string& description,
              const std::string& footer = "", const std::string& usage_tail = "");
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  CLI::App& app() { return app_; }

  // The words after `--`, untouched and in order, go to `words` (which parse() fills).
  void pass_through(std::vector<std::string>& words) { pass_through_ = &words; }

  // The command's first word names one of app()'s subcommands (braid checkpoint inspect DIR);
  // another word is "unknown <noun> 'x' (inspect, verify, export)", and none prints the help to
  // stderr, exit 2. Call after adding the subcommands.
  void require_subcommand(const std::string& noun);

  // nullopt: run the command. A value: the exit status, the help already printed.
  std::optional<int> parse(const std::vector<std::string>& args);

 private:
  // The words CLI11 left over (app_.remaining()): errors, or pass_through()'s.
  void take_leftovers() const;
  [[noreturn]] void fail(const std::string& message) const;
  std::string help() const;

  CLI::App app_;
  std::vector<std::string>* pass_through_ = nullptr;
  std::string subcommand_noun_;
};

}  // namespace braid::cli
