#include "braid/cli/option_values.h"

#include <cerrno>
#include <cstdlib>
#include <utility>

namespace braid::cli {

namespace detail {

std::string check_integer(std::string& text, long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != 0) return "expects an integer, got '" + text + "'";
  if (errno == ERANGE || value < lo || value > hi) {
    return text + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  }
  text = std::to_string(value);
  return "";
}

}  // namespace detail

CLI::Validator number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        std::strtod(text.c_str(), &end);
        if (text.empty() || *end != 0 || errno != 0) return "expects a number, got '" + text + "'";
        return "";
      },
      "");
}

CLI::Validator one_of(std::vector<std::string> choices, const std::string& noun) {
  std::string listed;
  for (const auto& c : choices) listed += (listed.empty() ? "" : ", ") + c;
  const std::string unknown = noun.empty() ? "unknown '" : "unknown " + noun + " '";
  return CLI::Validator(
      [choices = std::move(choices), listed, unknown](std::string& text) -> std::string {
        for (const auto& c : choices)
          if (text == c) return "";
        return unknown + text + "' (" + listed + ")";
      },
      "");
}

CLI::Option* repeatable(CLI::Option* option) {
  return option->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

}  // namespace braid::cli
