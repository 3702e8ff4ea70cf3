#include "braid/launch/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "braid/core/error.h"
#include "braid/launch/job_guard.h"
#include "braid/launch/proc_stat.h"
#include "braid/launch/single_copy.h"

namespace braid::launch {

namespace {

using Clock = std::chrono::steady_clock;

// How long mpirun may take to end the job after a rank aborted it or a host was lost, before the
// launcher kills mpirun and everything it started (its remote-host agents included).
constexpr auto kFailureGrace = std::chrono::seconds(3);

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

struct Child {
  pid_t pid = -1;
  int out = -1;  // read ends of the child's stdout / stderr
  int err = -1;
};

// Note [Launcher signals]: SIGINT, SIGTERM and SIGHUP (Ctrl-C, Slurm's or a scheduler's stop,
// a closed terminal) are blocked in the launcher and read from a signalfd in its output loop,
// so no handler or global flag is needed: the first one is forwarded to mpirun (which stops
// every rank), a second one or 10 s without an exit sends SIGKILL, and the launcher reports the
// interruption and exits 128 + signal without restarting. Children get the original mask back.
class SignalCatcher {
 public:
  SignalCatcher() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
    BRAID_CHECK(pthread_sigmask(SIG_BLOCK, &set, &old_) == 0, "launch: cannot block signals");
    fd_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    BRAID_CHECK(fd_ >= 0, "launch: signalfd failed: ", std::strerror(errno));
  }
  ~SignalCatcher() {
    close(fd_);
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SignalCatcher(const SignalCatcher&) = delete;
  SignalCatcher& operator=(const SignalCatcher&) = delete;

  int fd() const { return fd_; }
  const sigset_t& original_mask() const { return old_; }
  // The next caught signal's number, or 0 when none is pending.
  int next() const {
    signalfd_siginfo info;
    return read(fd_, &info, sizeof info) == sizeof info ? static_cast<int>(info.ssi_signo) : 0;
  }

 private:
  sigset_t old_;
  int fd_ = -1;
};

Child spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
            const sigset_t& child_mask) {
  int out[2], err[2];
  BRAID_CHECK(pipe(out) == 0 && pipe(err) == 0, "launch: pipe failed: ", std::strerror(errno));
  const pid_t launcher = getpid();
  pid_t pid = fork();
  BRAID_CHECK(pid >= 0, "launch: fork failed: ", std::strerror(errno));
  if (pid == 0) {
    // Note [Launcher death]: mpirun dies with the launcher, however the launcher dies (a SIGKILL
    // runs no handler), and takes its ranks with it (the guardian, job_guard.h, kills the ones
    // that linger). Before this, a SIGKILLed launcher's job ran on for 1.1 s here (output to a
    // file), 5-10 s in other runs (issue 26); now it is gone within 0.1 s (launch_kill_test.sh).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) _exit(127);  // the launcher died before prctl
    pthread_sigmask(SIG_SETMASK, &child_mask, nullptr);
    dup2(out[1], 1);
    dup2(err[1], 2);
    close(out[0]);
    close(err[0]);
    close(out[1]);
    close(err[1]);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "braid launch: cannot run '%s': %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  return {pid, out[0], err[0]};
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

// Note [Unreaped ranks]: OpenMPI 4.1's mpirun can miss a rank that dies while it is still
// starting (killed before it reached MPI_Init): the process stays a zombie child of mpirun,
// which never reaps it and waits for the job forever. The launcher looks at mpirun's children
// every 250 ms; one that has been a zombie for 3 s is such a rank, and the job is ended naming
// its pid (and its rank when the launcher saw it alive).
std::vector<pid_t> zombie_children(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::optional<ProcStat> s = read_proc_stat(e.path().string());
    if (s && s->state == 'Z' && s->ppid == parent)
      out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}

// Every live descendant of `root` on this machine, from the parent pids in /proc. OpenMPI puts
// each rank in a process group of its own, so a process-group kill would miss them.
std::vector<pid_t> descendants(pid_t root) {
  std::multimap<pid_t, pid_t> children;  // parent -> child
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (const std::optional<ProcStat> s = read_proc_stat(e.path().string()))
      children.emplace(s->ppid, static_cast<pid_t>(std::stol(name)));
  }
  std::vector<pid_t> out;
  std::vector<pid_t> todo = {root};
  while (!todo.empty()) {
    pid_t p = todo.back();
    todo.pop_back();
    auto [lo, hi] = children.equal_range(p);
    for (auto it = lo; it != hi; ++it) {
      out.push_back(it->second);
      todo.push_back(it->second);
    }
  }
  return out;
}

struct PumpResult {
  int status = 0;          // the child's exit status (128 + signal for a signal)
  bool timed_out = false;  // ended by --job-timeout
  int interrupted = 0;     // the signal that stopped the job (Note [Launcher signals])
  int mpirun_signal = 0;   // the signal that killed mpirun itself (0: it exited)
};

// The ranks' pids, learnt while they run: mpirun's notice of a death says "PID 0". With
// `stops`, also the ranks that are stopped (state T or t) now.
void look_at_ranks(const LaunchOptions& o, FailureCause& cause, bool stops) {
  if (o.job_dir.empty()) return;
  for (const JobProcess& p : job_processes(o.job_dir)) {
    if (p.rank < 0) continue;
    cause.know_pid(p.rank, p.pid);
    if (stops && (p.state == 'T' || p.state == 't')) cause.stopped(p.rank, p.pid);
  }
}

// Forwards the child's output line by line (retagged) until both pipes close; ends the job when
// it outlives the deadline or the launcher is signalled.
PumpResult pump(Child& c, const LaunchOptions& o, FailureCause& cause, const SignalCatcher& signals,
                bool under_mpirun) {
  PumpResult r;
  std::string pending[2];
  FILE* sinks[2] = {stdout, stderr};
  int fds[2] = {c.out, c.err};
  const auto start = Clock::now();
  Clock::time_point kill_at = Clock::time_point::max();  // SIGKILL if mpirun is still there
  bool killed = false;
  int status = 0;
  bool reaped = false;
  Clock::time_point drained_by = Clock::time_point::max();
  Clock::time_point next_look = start;
  bool looked_for_stops = false;
  std::map<pid_t, Clock::time_point> zombies;  // Note [Unreaped ranks]: first seen
  Clock::time_point next_zombie_look = start;
  while (fds[0] >= 0 || fds[1] >= 0) {
    pollfd p[3];
    int n = 0;
    for (int i = 0; i < 2; ++i)
      if (fds[i] >= 0) p[n++] = {fds[i], POLLIN, 0};
    p[n] = {signals.fd(), POLLIN, 0};
    poll(p, n + 1, 200);
    for (int sig; (sig = signals.next()) != 0;) {
      if (r.interrupted == 0) {
        r.interrupted = sig;
        std::fprintf(stderr, "braid launch: caught %s, stopping every rank\n",
                     signal_name(sig).c_str());
        kill(c.pid, sig);  // mpirun forwards it to every rank
        kill_at = Clock::now() + std::chrono::seconds(10);
      } else {
        kill_at = Clock::now();  // a second signal: no more waiting
      }
    }
    for (int k = 0; k < n; ++k) {
      if (!(p[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      int i = p[k].fd == fds[0] ? 0 : 1;
      char buf[65536];
      ssize_t got = read(fds[i], buf, sizeof buf);
      if (got <= 0) {
        if (!pending[i].empty()) pending[i] += '\n';
        got = 0;
        close(fds[i]);
        fds[i] = -1;
      }
      pending[i].append(buf, static_cast<size_t>(got));
      size_t nl;
      while ((nl = pending[i].find('\n')) != std::string::npos) {
        std::string line = pending[i].substr(0, nl);
        pending[i].erase(0, nl + 1);
        if (o.tag_output) line = retag_line(line);
        cause.observe(line);
        if (cause.failure_seen() && !looked_for_stops) {
          // A rank stopped now (SIGSTOP, a debugger) is why its peers time out; once mpirun
          // resumes it to end the job it may blame them (failure_cause.h names it first).
          look_at_ranks(o, cause, true);
          looked_for_stops = true;
        }
        std::fprintf(sinks[i], "%s\n", line.c_str());
        if (cause.job_failing() && kill_at == Clock::time_point::max()) {
          // mpirun is ending the job; a host it cannot reach must not keep it (and us) waiting.
          kill_at = Clock::now() + kFailureGrace;
        }
      }
      std::fflush(sinks[i]);
    }
    if (!reaped && Clock::now() >= next_look && static_cast<int>(cause.pids().size()) < o.nprocs) {
      // Every 250 ms until every rank is known (only this host's ranks can be: with other hosts
      // every 5 s after the first minute).
      look_at_ranks(o, cause, false);
      next_look = Clock::now() + (Clock::now() - start < std::chrono::minutes(1)
                                      ? std::chrono::milliseconds(250)
                                      : std::chrono::milliseconds(5000));
    }
    if (under_mpirun && !reaped && !killed && kill_at == Clock::time_point::max() &&
        Clock::now() >= next_zombie_look) {
      const auto now = Clock::now();
      next_zombie_look = now + std::chrono::milliseconds(250);
      for (pid_t z : zombie_children(c.pid)) {
        if (now - zombies.emplace(z, now).first->second < std::chrono::seconds(3)) continue;
        cause.unreaped(z);
        kill_at = now;  // mpirun will not end the job: end it
        break;
      }
    }
    if (o.job_timeout_s > 0 && !r.timed_out && r.interrupted == 0 &&
        std::chrono::duration<double>(Clock::now() - start).count() > o.job_timeout_s) {
      if (!looked_for_stops) look_at_ranks(o, cause, true);
      looked_for_stops = true;
      r.timed_out = true;
      kill(c.pid, SIGTERM);  // mpirun forwards it to every rank
      kill_at = Clock::now() + std::chrono::seconds(10);
    }
    if (!killed && !reaped && Clock::now() >= kill_at) {
      // mpirun did not end its ranks in time: end them and it, leaving no orphan behind.
      for (pid_t p : descendants(c.pid)) kill(p, SIGKILL);
      kill(c.pid, SIGKILL);
      killed = true;
    }
    // Once mpirun is gone its output ends within moments; a process that outlived it and holds
    // the pipes open must not keep the launcher waiting.
    if (!reaped && waitpid(c.pid, &status, WNOHANG) == c.pid) {
      reaped = true;
      drained_by = Clock::now() + std::chrono::seconds(2);
    }
    if (reaped && Clock::now() >= drained_by) {
      std::fprintf(stderr,
                   "braid launch: mpirun has exited but a process it started still holds the "
                   "job's output open; no longer waiting for it\n");
      for (int& fd : fds)
        if (fd >= 0) close(fd), fd = -1;
    }
  }
  if (!reaped) waitpid(c.pid, &status, 0);
  if (WIFSIGNALED(status)) r.mpirun_signal = WTERMSIG(status);
  r.status = WIFEXITED(status)     ? WEXITSTATUS(status)
             : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                   : 1;
  return r;
}

}  // namespace

std::string retag_line(const std::string& line) {
  // "[1,3]<stderr>:text" (mpirun --tag-output) -> "[rank 3] text"
  if (line.size() < 6 || line[0] != '[') return line;
  size_t comma = line.find(',');
  size_t close = line.find("]<");
  if (comma == std::string::npos || close == std::string::npos || comma > close) return line;
  size_t colon = line.find(">:", close);
  if (colon == std::string::npos) return line;
  std::string rank = line.substr(comma + 1, close - comma - 1);
  if (rank.empty() || rank.find_first_not_of("0123456789") != std::string::npos) return line;
  return "[rank " + rank + "] " + line.substr(colon + 2);
}

int launch(const LaunchOptions& options) {
  LaunchOptions o = options;
  if (o.network.empty()) o.network = default_network(o.hostfile);
  BRAID_CHECK(o.nprocs >= 1, "launch: -n ", o.nprocs, " must be at least 1");
  BRAID_CHECK(!o.command.empty(), "launch: no program given (braid launch -n N -- PROGRAM ...)");
  BRAID_CHECK(o.max_restarts >= 0, "launch: --max-restarts ", o.max_restarts, " is negative");
  // A program that cannot be started is named here, not left to mpirun's exit 132. (With a
  // hostfile the program may exist only on the other hosts.)
  if (o.hostfile.empty()) {
    const std::string& program = o.command.front();
    const bool path = program.find('/') != std::string::npos;
    BRAID_CHECK(!find_on_path(program).empty(), "launch: cannot start '", program, "': ",
                !path                                ? "not found on PATH"
                : access(program.c_str(), F_OK) != 0 ? "no such file"
                                                     : "not executable");
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::string mpirun = find_on_path("mpirun");
  if (mpirun.empty())
    BRAID_CHECK(o.nprocs == 1 && o.hostfile.empty(), "launch: mpirun not found, and ", o.nprocs,
                " ranks need it (apt-get install openmpi-bin, or scripts/setup-deps.sh)");
  JobGuard guard;  // Note [Job leftovers]
  o.job_dir = guard.dir();
  o.single_copy = resolved_single_copy(o);  // Note [Single copy]
  SignalCatcher signals;
  int status = 0;
  FailureCause previous;
  for (int attempt = 0; attempt <= o.max_restarts; ++attempt) {
    auto env = launch_environment(o, cores, attempt);
    std::vector<std::string> argv = mpirun.empty() ? o.command : mpirun_command(o, mpirun, env);
    LaunchOptions local = o;
    if (mpirun.empty()) local.tag_output = false;
    Child child = spawn(argv, env, signals.original_mask());
    FailureCause cause;
    PumpResult r = pump(child, local, cause, signals, !mpirun.empty());
    status = r.status;
    if (int left = guard.end_attempt(); left > 0)
      std::fprintf(stderr, "braid launch: %d process(es) of the job outlived %s; killed them\n",
                   left, mpirun.empty() ? "the program" : "mpirun");
    if (r.interrupted) {
      // Stopped from outside: not a failure to retry. The status says which signal.
      std::fprintf(stderr, "braid launch: interrupted by %s; the job stopped (exit %d)\n",
                   signal_name(r.interrupted).c_str(), status);
      return 128 + r.interrupted;
    }
    if (status == 0) return 0;
    std::string why =
        r.timed_out ? "the job ran past --job-timeout " + format_seconds(o.job_timeout_s) + " s"
        : r.mpirun_signal && !cause.failure_seen() && !cause.has_unreaped()
            ? std::string(mpirun.empty() ? "the program" : "mpirun") + " (pid " +
                  std::to_string(child.pid) + ") was killed by " + signal_name(r.mpirun_signal)
            : cause.cause(status);
    if (attempt > 0 && !r.timed_out && cause.repeats(previous)) {
      // Note [Deterministic failures]: another attempt would fail the same way again.
      const std::string at =
          cause.step() >= 0 ? "at step " + std::to_string(cause.step()) : "before any step";
      std::fprintf(stderr,
                   "braid launch: job failed (exit %d): deterministic failure, not restarting: "
                   "attempts %d and %d failed the same way %s: %s\n",
                   status, attempt, attempt + 1, at.c_str(), why.c_str());
      return status;
    }
    if (attempt < o.max_restarts) {
      std::fprintf(stderr, "braid launch: attempt %d of %d failed (exit %d): %s; restarting\n",
                   attempt + 1, o.max_restarts + 1, status, why.c_str());
      std::this_thread::sleep_for(std::chrono::seconds(1));
    } else {
      std::fprintf(
          stderr, "braid launch: job failed (exit %d%s): %s\n", status,
          o.max_restarts ? (", after " + std::to_string(o.max_restarts) + " restarts").c_str() : "",
          why.c_str());
    }
    previous = std::move(cause);
  }
  return status;
}

}  // namespace braid::launch
