#include "braid/launch/failure_cause.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <regex>
#include <set>
#include <vector>

namespace braid::launch {

namespace {

// A rank's error lines kept for repeats(); a job that prints thousands says no more with them.
constexpr size_t kMaxErrorLines = 64;

// "[rank 3] text" -> "text"; other lines are unchanged.
std::string without_rank_tag(const std::string& line) {
  if (line.rfind("[rank ", 0) != 0) return line;
  size_t close = line.find("] ");
  return close == std::string::npos ? line : line.substr(close + 2);
}

// The step a line reports: "step    12/16 | loss ...", "step 4 | checkpoint ...",
// "resuming from DIR (step 4, 1.2 MiB)"; -1 for any other line.
int64_t reported_step(const std::string& line) {
  const std::string text = without_rank_tag(line);
  size_t at = std::string::npos;
  if (text.rfind("step ", 0) == 0) {
    at = text.find_first_not_of(' ', 5);
  } else if (text.rfind("resuming from ", 0) == 0) {
    at = text.rfind("(step ");
    if (at != std::string::npos) at += 6;
  }
  if (at == std::string::npos || at >= text.size() || !std::isdigit(text[at])) return -1;
  return std::strtoll(text.c_str() + at, nullptr, 10);
}

// Note [Root cause first]: ranks abort within moments of each other, in an order set by their
// timeouts, and a rank waiting for a healthy peer that itself waits for the culprit says "ranks
// [0] never arrived"; a rank whose shared-memory peer aborted first says that peer "left the
// group", though the peer only reacted to a lost host. So an abort line is ranked by what it
// names: a host (2), a culprit rank, one that died, never sent or left (1), nothing (0). The
// highest wins; among equals, one whose named ranks did not abort themselves (a rank that prints
// its own abort was alive and waiting: rank 1 waiting for its host's leader, rank 0, which waits
// for h2 across a link that went down, says "ranks [0 on host h1] never arrived"), then the
// first. A lost host mpirun reported beats a line that names no host.
int culprit_rank(const std::string& l) {
  if (l.find("(host ") != std::string::npos || l.find(" on host ") != std::string::npos) return 2;
  if (l.find(" died") != std::string::npos || l.find("never sent") != std::string::npos ||
      l.find("left the group") != std::string::npos)
    return 1;
  return 0;
}

// The rank that printed an abort line ("... braid: rank 1: aborting ..."), or -1.
int aborting_rank(const std::string& l) {
  static const std::regex by("rank ([0-9]+): aborting the job");
  std::smatch m;
  return std::regex_search(l, m, by) ? std::atoi(m[1].str().c_str()) : -1;
}

// The ranks an abort line blames: its "ranks [0 on host h1, 2]" list or "rank 2 (host h2)".
std::vector<int> blamed_ranks(const std::string& l) {
  std::vector<int> out;
  static const std::regex list("ranks \\[([^\\]]*)\\]"), number("\\b([0-9]+)\\b"),
      one("rank ([0-9]+) \\(host ");
  std::smatch m;
  if (std::regex_search(l, m, list)) {
    const std::string inside = m[1].str();
    for (std::sregex_iterator it(inside.begin(), inside.end(), number), end; it != end; ++it)
      out.push_back(std::atoi((*it)[1].str().c_str()));
  } else if (std::regex_search(l, m, one)) {
    out.push_back(std::atoi(m[1].str().c_str()));
  }
  return out;
}

}  // namespace

// Note [Root cause first].
std::string FailureCause::root_abort() const {
  std::set<int> aborted;
  for (const std::string& l : aborts_) aborted.insert(aborting_rank(l));
  auto waiting_on_the_waiting = [&](const std::string& l) {
    const std::vector<int> blamed = blamed_ranks(l);
    return !blamed.empty() &&
           std::all_of(blamed.begin(), blamed.end(), [&](int r) { return aborted.count(r) > 0; });
  };
  const std::string* best = nullptr;
  for (const std::string& l : aborts_) {
    if (!best || culprit_rank(l) > culprit_rank(*best) ||
        (culprit_rank(l) == culprit_rank(*best) && waiting_on_the_waiting(*best) &&
         !waiting_on_the_waiting(l)))
      best = &l;
  }
  return best ? *best : std::string();
}

void FailureCause::observe(const std::string& line) {
  if (int64_t s = reported_step(line); s > step_) step_ = s;
  // ORTE, when a host's daemon dies or its link goes down:
  //   ORTE has lost communication with a remote daemon.
  //     HNP daemon   : [[1234,0],0] on node vm
  //     Remote daemon: [[1234,0],2] on node h2
  static const std::regex remote_daemon("Remote daemon: *\\S+ on node (\\S+)");
  if (line.find("lost communication with a remote daemon") != std::string::npos) {
    lost_host_pending_ = true;
    return;
  }
  if (lost_host_pending_ && host_line_.empty()) {
    std::smatch m;
    if (std::regex_search(line, m, remote_daemon)) {
      host_line_ = "lost host " + m[1].str() +
                   ": its daemon died or its network link went down (mpirun lost contact)";
      return;
    }
  }
  static const std::regex noticed(
      "process rank ([0-9]+) with PID [0-9]+ on node \\S+ exited on "
      "signal [0-9]+[^.]*|process rank ([0-9]+) .*exited.*");
  const bool is_abort =
      line.find("aborting the job after a communication failure") != std::string::npos;
  const bool is_rank_error =
      line.rfind("[rank ", 0) == 0 &&
      (line.find("error") != std::string::npos || line.find("Error") != std::string::npos);
  if ((is_abort || is_rank_error) && errors_.size() < kMaxErrorLines) errors_.insert(line);
  if (is_abort) {
    if (aborts_.size() < kMaxErrorLines) aborts_.push_back(line);
  } else if (is_rank_error) {
    if (rank_error_.empty()) rank_error_ = line;
  } else if (mpirun_line_.empty()) {
    std::smatch m;
    if (std::regex_search(line, m, noticed)) {
      mpirun_line_ = m.str();
      mpirun_rank_ = std::atoi((m[1].matched ? m[1] : m[2]).str().c_str());
    }
  }
}

std::string FailureCause::error_line() const {
  return aborts_.empty() ? rank_error_ : root_abort();
}

std::string FailureCause::cause(int exit_status) const {
  std::string why;
  // Note [Root cause first]: a lost host beats an abort that names none.
  const std::string abort_line = root_abort();
  if (!abort_line.empty() && (host_line_.empty() || culprit_rank(abort_line) == 2)) {
    why = abort_line;
  } else if (!host_line_.empty()) {
    why = host_line_;
  } else if (!rank_error_.empty()) {
    why = rank_error_;
  } else if (!mpirun_line_.empty()) {
    // OpenMPI 4.1's notice says "with PID 0" for a rank it started here, whenever it died: name
    // the pid the launcher saw, or say that it is not known.
    why = mpirun_line_;
    const std::string zero = " with PID 0 ";
    if (size_t at = why.find(zero); at != std::string::npos) {
      auto pid = pids_.find(mpirun_rank_);
      why.replace(at, zero.size(),
                  pid != pids_.end() ? " with PID " + std::to_string(pid->second) + " "
                                     : " (PID not known: it died before the launcher saw it) ");
    }
  } else if (unreaped_pid_ > 0) {
    std::string who = "a rank";
    for (const auto& [rank, pid] : pids_)
      if (pid == unreaped_pid_) who = "rank " + std::to_string(rank);
    why = who + " (pid " + std::to_string(unreaped_pid_) +
          ") died during start-up and mpirun never noticed (it left the process unreaped); the "
          "launcher ended the job";
  } else {
    why = "exit status " + std::to_string(exit_status) + " (no rank printed an error)";
  }
  if (stopped_.empty()) return why;
  // A stopped rank makes its peers time out, and once mpirun resumes it to end the job, it may
  // time out too and blame a healthy peer: the stopped one is named first.
  std::string note;
  for (const auto& [rank, pid] : stopped_)
    note += (note.empty() ? "" : ", ") + ("rank " + std::to_string(rank)) + " (pid " +
            std::to_string(pid) + ")";
  return note + (stopped_.size() == 1 ? " was" : " were") +
         " stopped (SIGSTOP, or held by a debugger) when the job began to fail: " + why;
}

// Note [Deterministic failures]: a failure that a restart replays exactly (a full disk, a bad
// config, a file the program cannot read) would fail every one of --max-restarts attempts. An
// attempt repeats the previous one when one of its ranks printed an error line (or abort line)
// that the previous attempt printed too, word for word, and the latest step the job reported
// (a step, checkpoint or resume line) is the same: the job made no progress a restart could keep.
// Deaths by a signal and timeouts are never called deterministic (an OOM killer, an operator or
// a lost host strike from outside), and the lines that name a pid or a time differ every attempt.
bool FailureCause::repeats(const FailureCause& previous) const {
  if (step_ != previous.step_) return false;
  for (const std::string& line : errors_)
    if (previous.errors_.count(line)) return true;
  return false;
}

}  // namespace braid::launch
