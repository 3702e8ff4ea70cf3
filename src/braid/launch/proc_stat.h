// Reading /proc of processes that may exit at any moment (the launcher's watch over mpirun and
// the ranks, job_guard's sweep): a process gone between listing /proc and reading its files reads
// as nothing, never as an error. (A std::ifstream there throws "basic_filebuf::underflow error
// reading the file: No such process" when read() fails with ESRCH.)
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

namespace braid::launch {

// The whole file, or as much as could be read ("" when it cannot be opened).
std::string read_proc_file(const std::string& path);

struct ProcStat {
  char state = 0;  // R, S, D, Z, X, ...
  pid_t ppid = 0;
};

// State and parent of the process whose /proc directory is `dir` ("/proc/123"); none when it
// is gone or its stat cannot be parsed.
std::optional<ProcStat> read_proc_stat(const std::string& dir);

}  // namespace braid::launch
