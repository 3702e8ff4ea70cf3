// FailureCause: what the launcher makes of one attempt's output (launcher.h). It keeps the lines
// that explain a failure and picks the best one-line cause, learns which pid each local rank has
// (mpirun's own notice of a rank's death says "PID 0"), notes the ranks found stopped (SIGSTOP,
// a debugger) when the job began to fail, follows the latest step the job reported, and tells
// whether an attempt failed as the previous one did (Note [Deterministic failures]).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace braid::launch {

class FailureCause {
 public:
  void observe(const std::string& line);  // a (retagged) output line
  std::string cause(int exit_status) const;
  // A rank aborted the job or a host was lost: mpirun should end the job now.
  bool job_failing() const { return !aborts_.empty() || !host_line_.empty(); }
  // Some line says the job is failing (a rank's error, an abort, a death mpirun noticed).
  bool failure_seen() const {
    return job_failing() || !rank_error_.empty() || !mpirun_line_.empty();
  }

  void know_pid(int rank, pid_t pid) { pids_[rank] = pid; }
  const std::map<int, pid_t>& pids() const { return pids_; }
  void stopped(int rank, pid_t pid) { stopped_.emplace(rank, pid); }
  // Note [Unreaped ranks]: a rank process mpirun left dead and unreaped, so never noticed.
  void unreaped(pid_t pid) { unreaped_pid_ = pid; }
  bool has_unreaped() const { return unreaped_pid_ > 0; }

  // The latest training step the job reported (a step, checkpoint or resume line); -1: none.
  int64_t step() const { return step_; }
  // Note [Deterministic failures]: this attempt failed with an error a rank printed that the
  // previous attempt printed too, at the same step.
  bool repeats(const FailureCause& previous) const;
  // The line that repeats() compares: the rank's own error, without the launcher's notes.
  std::string error_line() const;

 private:
  std::string root_abort() const;    // Note [Root cause first] (failure_cause.cpp)
  std::string rank_error_;           // first "[rank R] ... error ..." line
  std::vector<std::string> aborts_;  // every "braid: rank R: aborting the job ..." line, in order
  std::string mpirun_line_;          // "mpirun noticed that process rank R ... exited on signal 9"
  int mpirun_rank_ = -1;             // the rank mpirun_line_ names
  std::string host_line_;            // a lost host: "lost the daemon of host h2 ..."
  bool lost_host_pending_ = false;   // ORTE's "lost communication" seen, its "Remote daemon" next
  std::set<std::string> errors_;     // every rank error and abort line (repeats())
  std::map<int, pid_t> pids_;        // local ranks' pids
  std::map<int, pid_t> stopped_;     // ranks found stopped when the job began to fail
  pid_t unreaped_pid_ = 0;           // Note [Unreaped ranks]
  int64_t step_ = -1;
};

}  // namespace braid::launch
