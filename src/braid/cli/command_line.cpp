#include "braid/cli/command_line.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <memory>

#include "braid/cli/help_formatter.h"
#include "braid/core/error.h"

namespace braid::cli {

CommandLine::CommandLine(const std::string& command, const std::string& description,
                         const std::string& footer, const std::string& usage_tail)
    : app_(description, "braid " + command) {
  // Set before any subcommand is added: a subcommand inherits all of these.
  app_.formatter(std::make_shared<HelpFormatter>(usage_tail));
  app_.set_help_flag("-h,--help", "print this help and exit");
  app_.footer(footer);
  app_.allow_extras();  // take_leftovers() reports them
  app_.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

void CommandLine::require_subcommand(const std::string& noun) {
  subcommand_noun_ = noun;
  app_.require_subcommand(0, 1);  // at most one; none is reported by parse()
}

std::optional<int> CommandLine::parse(const std::vector<std::string>& args) {
  try {
    app_.parse(std::vector<std::string>(args.rbegin(), args.rend()));  // CLI11 pops from the back
  } catch (const CLI::CallForHelp&) {
    std::fputs(help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    // A leftover word is the likelier cause (a misspelt option leaves its value to a positional)
    // and goes first. CLI11 has read every word by now: it checks values and requirements after
    // the last, and a value can only be missing at the end.
    take_leftovers();
    std::string message = e.what();
    // CLI11 2.1.2 says "--out: 1 required DIR missing" for a value missing at the line's end.
    const auto colon = message.find(": ");
    if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) && message.ends_with(" missing") &&
        colon != std::string::npos) {
      message = message.substr(0, colon) + " needs a value";
    }
    fail(message);
  }
  take_leftovers();
  if (!subcommand_noun_.empty() && app_.get_subcommands().empty()) {
    std::fputs(help().c_str(), stderr);
    return 2;
  }
  return std::nullopt;
}

// Note [Leftover words]: with allow_extras, CLI11 keeps every word it could not place, in order,
// in remaining(): unknown options, words no positional takes, and the `--` that ends the options
// followed by whatever no positional took after it. Until that mark every `--` that is no option's
// value is the mark, so the first "--" in remaining() is it, and the words after it are the
// command line's own, untouched (CLI11 reads nothing after the mark as an option).
void CommandLine::take_leftovers() const {
  const std::vector<std::string> words = app_.remaining(true);
  const auto mark = std::find(words.begin(), words.end(), std::string("--"));
  if (mark != words.begin()) {
    const std::string& word = words.front();
    if (word.size() > 1 && word[0] == '-' && !std::isdigit(static_cast<unsigned char>(word[1]))) {
      fail("unknown option '" + word.substr(0, word.find('=')) + "'");
    }
    if (!subcommand_noun_.empty() && app_.get_subcommands().empty()) {
      std::string names;
      for (const CLI::App* sub : app_.get_subcommands([](const CLI::App*) { return true; }))
        names += (names.empty() ? "" : ", ") + sub->get_name();
      fail("unknown " + subcommand_noun_ + " '" + word + "' (" + names + ")");
    }
    fail("unexpected argument '" + word + "'" +
         (pass_through_ ? ": the program goes after --" : ""));
  }
  if (mark == words.end()) return;
  if (pass_through_) {
    pass_through_->assign(mark + 1, words.end());
  } else if (mark + 1 != words.end()) {
    fail("unexpected argument '" + *(mark + 1) + "'");
  }
}

void CommandLine::fail(const std::string& message) const {
  std::string command = app_.get_name();
  for (const CLI::App* sub : app_.get_subcommands()) command += " " + sub->get_name();
  BRAID_THROW(message, " (see ", command, " --help)");
}

std::string CommandLine::help() const {
  // A command made of subcommands (braid bench) shows each one's options too.
  if (!subcommand_noun_.empty() && app_.get_subcommands().empty()) {
    return app_.help("", CLI::AppFormatMode::All);
  }
  return app_.help();
}

}  // namespace braid::cli
