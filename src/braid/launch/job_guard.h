// JobGuard: whatever a `braid launch` job leaves on this machine goes when the launcher is done
// with it, however the job or the launcher ends (Note [Job leftovers]).
//   - Every process of the job carries kJobVariable=dir() in its environment (the launcher puts
//     it in mpirun's; mpirun's ranks inherit it), so the job's processes are found by it, wherever
//     they were reparented to.
//   - dir() is the job's private directory (on /dev/shm): when every rank runs on this host,
//     OpenMPI's shared-memory segments and its session directory go there (mpirun_command.cpp).
//   - end_attempt() kills what an attempt left running (an mpirun killed by a signal leaves its
//     ranks behind for a second or more) and empties the directory, before any restart.
//   - A guardian process, forked at construction, does the same and removes the directory when
//     the launcher dies without doing it (SIGKILL, a crash); the destructor stops it.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace braid::launch {

// The environment variable that marks a job's processes: its value is the job's directory.
inline constexpr const char* kJobVariable = "BRAID_LAUNCH_JOB";

struct JobProcess {
  pid_t pid = 0;
  int rank = -1;   // OMPI_COMM_WORLD_RANK; -1 for mpirun and other helpers
  char state = 0;  // /proc/PID/stat's state: R, S, D, T (stopped), t (traced), ...
};

// The live processes on this machine whose environment holds kJobVariable=job_dir.
std::vector<JobProcess> job_processes(const std::string& job_dir);

// SIGKILLs every process of the job until none is left (at most `patience_ms`); returns how many
// it killed. Processes that would not go are named on stderr.
int kill_job(const std::string& job_dir, int patience_ms = 5000);

class JobGuard {
 public:
  JobGuard();  // makes the directory (/dev/shm, else $TMPDIR or /tmp) and forks the guardian
  ~JobGuard();
  JobGuard(const JobGuard&) = delete;
  JobGuard& operator=(const JobGuard&) = delete;

  const std::string& dir() const { return dir_; }
  // Kills the processes an attempt left behind and empties the directory; returns how many
  // processes it killed.
  int end_attempt();

 private:
  std::string dir_;
  pid_t guardian_ = -1;
  int to_guardian_ = -1;  // the write end of the guardian's pipe: EOF means the launcher died
};

}  // namespace braid::launch
