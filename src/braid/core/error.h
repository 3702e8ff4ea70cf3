// Errors: every failure is an exception whose message names the thing, the place and the
// numbers. The CLI turns them into one line and a non-zero exit; library code never exits.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace braid {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Thrown when a device's memory budget would be crossed; the message carries the
// per-category breakdown and what would help.
class OutOfMemory : public Error {
 public:
  explicit OutOfMemory(const std::string& what) : Error(what) {}
};

// An error whose line has been printed already (a training run prints it while its ranks are
// still connected: tearing the world down first lets mpirun kill a rank before it says why).
// The binary's handler only sets the exit status.
class ReportedError : public Error {
 public:
  explicit ReportedError(const std::string& what) : Error(what) {}
};

// Thrown by communication when a peer is gone, a collective timed out or ranks disagree.
class CommError : public Error {
 public:
  explicit CommError(const std::string& what) : Error(what) {}
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void throw_check_failure(const char* cond, const char* file, int line,
                                      const std::string& msg);
}  // namespace detail

}  // namespace braid

// BRAID_CHECK(cond, parts...) throws braid::Error with the parts streamed together.
#define BRAID_CHECK(cond, ...)                                                    \
  do {                                                                            \
    if (!(cond)) [[unlikely]]                                                     \
      ::braid::detail::throw_check_failure(#cond, __FILE__, __LINE__,             \
                                           ::braid::detail::concat(__VA_ARGS__)); \
  } while (0)

// BRAID_THROW(parts...) throws braid::Error unconditionally.
#define BRAID_THROW(...) throw ::braid::Error(::braid::detail::concat(__VA_ARGS__))
