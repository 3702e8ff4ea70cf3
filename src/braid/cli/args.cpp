#include "braid/cli/args.h"

#include <cerrno>
#include <cstdlib>
#include <limits>

#include "braid/core/error.h"

namespace braid::cli {

int64_t parse_int(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(value.c_str(), &end, 10);
  BRAID_CHECK(!value.empty() && end && *end == 0 && errno == 0, flag, " expects an integer, got '",
              value, "'");
  return x;
}

int parse_int32(const std::string& flag, const std::string& value) {
  int64_t x = parse_int(flag, value);
  BRAID_CHECK(x >= std::numeric_limits<int>::min() && x <= std::numeric_limits<int>::max(), flag,
              " ", x, " is out of range");
  return static_cast<int>(x);
}

double parse_number(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  errno = 0;
  double x = std::strtod(value.c_str(), &end);
  BRAID_CHECK(!value.empty() && end && *end == 0 && errno == 0, flag, " expects a number, got '",
              value, "'");
  return x;
}

}  // namespace braid::cli
