// Command-line value parsing shared by the subcommands: a value must be the whole string, and a
// bad one is an error naming the option ("--iters expects an integer, got 'x'").
#pragma once

#include <cstdint>
#include <string>

namespace braid::cli {

int64_t parse_int(const std::string& flag, const std::string& value);
// parse_int for an `int` option: a value outside int's range is an error, never truncated.
int parse_int32(const std::string& flag, const std::string& value);
double parse_number(const std::string& flag, const std::string& value);

}  // namespace braid::cli
