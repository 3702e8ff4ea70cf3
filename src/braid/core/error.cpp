#include "braid/core/error.h"

namespace braid::detail {

void throw_check_failure(const char* cond, const char* file, int line, const std::string& msg) {
  // The user-facing message comes first; the source location helps us, not them.
  std::string what = msg.empty() ? std::string("check failed: ") + cond : msg;
  (void)file;
  (void)line;
  throw Error(what);
}

}  // namespace braid::detail
