#include "braid/launch/proc_stat.h"

#include <fcntl.h>
#include <unistd.h>

#include <sstream>

namespace braid::launch {

std::string read_proc_file(const std::string& path) {
  std::string out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[8192];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

std::optional<ProcStat> read_proc_stat(const std::string& dir) {
  const std::string stat = read_proc_file(dir + "/stat");
  const size_t close_paren = stat.rfind(')');  // the command name may hold spaces and parens
  if (close_paren == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(close_paren + 1));
  ProcStat s;
  if (!(fields >> s.state >> s.ppid)) return std::nullopt;
  return s;
}

}  // namespace braid::launch
