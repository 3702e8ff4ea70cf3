// The look of every `braid ... --help`: CLI11's layout (description, usage, positionals,
// options with their value names and defaults, subcommands, footer), with every text
// word-wrapped to the repository's 100 columns. An option's description wraps within its column,
// so the commands write their help as plain sentences, never with line breaks of their own;
// a line break they do write (a footer's separate notes) is kept. A command made of subcommands
// (braid bench) lists each one's positionals and options under its name, one line each, where
// CLI11 would print a block per subcommand.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <string>

namespace braid::cli {

class HelpFormatter : public CLI::Formatter {
 public:
  static constexpr std::size_t kWidth = 100;

  // usage_tail: what the usage line ends with after CLI11's own, e.g. "-- PROGRAM [ARGS...]"
  // for braid launch, whose program is no CLI11 positional (launch_command.cpp).
  explicit HelpFormatter(std::string usage_tail = "");

  std::string make_description(const CLI::App* app) const override;
  std::string make_usage(const CLI::App* app, std::string name) const override;
  std::string make_option_desc(const CLI::Option* opt) const override;
  std::string make_subcommand(const CLI::App* sub) const override;
  std::string make_expanded(const CLI::App* sub) const override;
  std::string make_footer(const CLI::App* app) const override;

 private:
  // One help line: `name` in the first column, `description` wrapped in the second.
  std::string line(const std::string& name, const std::string& description) const;

  std::string usage_tail_;
};

// text in lines of at most `width` columns, broken at spaces. The text's own line breaks stay,
// and a wrapped line's continuation keeps that line's indentation. A word longer than `width`
// stands on a line of its own.
std::string wrap(const std::string& text, std::size_t width);

}  // namespace braid::cli
