#include "braid/cli/help_formatter.h"

#include <sstream>
#include <utility>

namespace braid::cli {

namespace {

// One line of text (no line break inside), wrapped; continuations indented as the line is.
void wrap_line(const std::string& line, std::size_t width, std::string& out) {
  const std::size_t indent = line.find_first_not_of(' ');
  if (indent == std::string::npos) return;  // a blank line stays blank
  const std::string pad(indent, ' ');
  std::istringstream words(line.substr(indent));
  std::size_t column = 0;
  for (std::string word; words >> word;) {
    if (column == 0) {
      out += pad + word;
      column = indent + word.size();
    } else if (column + 1 + word.size() <= width) {
      out += ' ' + word;
      column += 1 + word.size();
    } else {
      out += '\n' + pad + word;
      column = indent + word.size();
    }
  }
}

}  // namespace

std::string wrap(const std::string& text, std::size_t width) {
  std::string out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (start > 0) out += '\n';
    wrap_line(text.substr(start, end - start), width, out);
    start = end + 1;
  }
  return out;
}

HelpFormatter::HelpFormatter(std::string usage_tail) : usage_tail_(std::move(usage_tail)) {
  column_width(32);  // CLI11's 30, and room for "    --max-bytes SIZE=268435456"
}

std::string HelpFormatter::make_description(const CLI::App* app) const {
  const std::string description = app->get_description();
  return description.empty() ? "" : wrap(description, kWidth) + "\n\n";
}

std::string HelpFormatter::make_usage(const CLI::App* app, std::string name) const {
  std::string usage = CLI::Formatter::make_usage(app, std::move(name));  // ends in '\n'
  if (!usage_tail_.empty()) usage.insert(usage.size() - 1, " " + usage_tail_);
  return usage;
}

std::string HelpFormatter::make_option_desc(const CLI::Option* opt) const {
  return wrap(opt->get_description(), kWidth - column_width_);  // format_help indents the rest
}

std::string HelpFormatter::make_subcommand(const CLI::App* sub) const {
  return line(sub->get_display_name(true), sub->get_description());
}

std::string HelpFormatter::make_expanded(const CLI::App* sub) const {
  std::string out = line(sub->get_display_name(true), sub->get_description());
  for (const CLI::Option* opt : sub->get_options()) {
    if (opt == sub->get_help_ptr()) continue;
    const bool positional = opt->get_positional();
    out += line("  " + make_option_name(opt, positional) + make_option_opts(opt),
                opt->get_description());
  }
  return out;
}

std::string HelpFormatter::line(const std::string& name, const std::string& description) const {
  std::ostringstream out;
  CLI::detail::format_help(out, name, wrap(description, kWidth - column_width_), column_width_);
  return out.str();
}

std::string HelpFormatter::make_footer(const CLI::App* app) const {
  const std::string footer = app->get_footer();
  return footer.empty() ? "" : wrap(footer, kWidth) + "\n";
}

}  // namespace braid::cli
