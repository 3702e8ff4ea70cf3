// The values of braid's options, checked as CLI11 validators: on a bad value CLI11 throws its
// ValidationError, "<option>: <what is wrong>" ("--iters: expects an integer, got 'x'"), which
// command_line.h turns into the command's one error line.
//
// Note [Option values]: CLI11 2.1.2 converts an integer with strtoll(text, base 0), so "010" is
// 8, "0x10" is 16 and "true" is 1, and calls a bad one "Could not convert: --iters = x". braid's
// integers are decimal (as they always were): integer<T>() checks the whole text as a decimal
// integer within T's range and hands CLI11 its plain decimal form, so that CLI11's conversion
// reads the same number. It is a transform (it rewrites the text), which CLI11 applies before
// converting: app.add_option("--iters", iters)->transform(integer<int>()).
#pragma once

#include <CLI/CLI.hpp>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace braid::cli {

namespace detail {
// "" when `text` is a decimal integer in [lo, hi] (text then holds its plain form), else what is
// wrong with it.
std::string check_integer(std::string& text, long long lo, long long hi);
}  // namespace detail

// A signed integer option within T's range (Note [Option values]); use with Option::transform.
template <typename T>
CLI::Validator integer() {
  static_assert(std::is_integral_v<T> && std::is_signed_v<T>, "integer<T>: a signed integer type");
  return CLI::Validator(
      [](std::string& text) {
        return detail::check_integer(text, std::numeric_limits<T>::min(),
                                     std::numeric_limits<T>::max());
      },
      "");
}

// A floating-point option: the whole text a number (strtod), within double's range.
CLI::Validator number();

// One of `choices`; anything else is "unknown <noun> 'x' (a, b, c)" (noun may be empty).
CLI::Validator one_of(std::vector<std::string> choices, const std::string& noun = "");

// An option that may be given many times, one value each (--set a=1 --set b=2), kept in order.
// CLI11's vector options would otherwise take every following word up to the next option,
// swallowing braid launch's `--` ("--mpirun-arg X -- PROGRAM").
CLI::Option* repeatable(CLI::Option* option);

}  // namespace braid::cli
