// The braid binary's commands. Each lives in its own cli/<name>_command.cpp, parses its
// arguments only (with CLI11, through command_line.h), and calls into train/ (or below).
// Registration happens at static initialisation into a constant table; nothing mutable is
// shared at run time.
#pragma once

#include <string>
#include <vector>

namespace braid::cli {

// Runs the command on the arguments after its name; returns the exit status. A bad command
// line, like any failure, is an exception: main prints "braid <name>: error: <what>".
using CommandFn = int (*)(const std::vector<std::string>& args);

struct Command {
  const char* name;
  const char* summary;
  CommandFn run;
};

bool register_command(const Command& c);
const std::vector<Command>& commands();

}  // namespace braid::cli

#define BRAID_CONCAT_INNER(a, b) a##b
#define BRAID_CONCAT(a, b) BRAID_CONCAT_INNER(a, b)
// BRAID_COMMAND("train", "train a model from a config", run_train);
#define BRAID_COMMAND(name, summary, fn)                                                 \
  [[maybe_unused]] static const bool BRAID_CONCAT(braid_command_registered_, __LINE__) = \
      ::braid::cli::register_command({name, summary, fn})
