#include "braid/launch/job_guard.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "braid/core/error.h"
#include "braid/launch/proc_stat.h"

namespace braid::launch {

// Note [Job leftovers]: measured here (OpenMPI 4.1.4) before the guard existed, an mpirun that
// died by a signal left its ranks' 4 MiB shared-memory segments
// (/dev/shm/vader_segment.HOST.UID.JOB.RANK) and its session directory (/tmp/ompi.HOST.UID/...)
// behind; its ranks lived on for about a second (until they noticed their server was gone), and a
// SIGKILLed launcher left mpirun and the ranks running for 1-10 s. So the launcher gives each job
// a directory of its own for those files (mpirun_command.cpp), marks the job's processes with
// kJobVariable, starts mpirun with PR_SET_PDEATHSIG (launcher.cpp, Note [Launcher death]), and
// after every attempt kills whatever carries the mark and empties the directory. A guardian
// process does the same when the launcher itself is killed: it waits on a pipe only the launcher
// writes to, and its end of file means the launcher is gone. The guardian is in a session of its
// own and ignores the signals that stop a job, so a terminal's Ctrl-C or a process-group kill
// reaches the launcher (which stops the job itself) and never leaves the guardian's work undone.

namespace {

// The value of `name` in a NUL-separated environment block ("" when absent); `found` says whether
// it is there.
std::string env_value(const std::string& block, const std::string& name, bool* found = nullptr) {
  const std::string key = name + "=";
  for (size_t at = 0; at < block.size();) {
    size_t end = block.find('\0', at);
    if (end == std::string::npos) end = block.size();
    if (block.compare(at, key.size(), key) == 0) {
      if (found) *found = true;
      return block.substr(at + key.size(), end - at - key.size());
    }
    at = end + 1;
  }
  if (found) *found = false;
  return "";
}

std::string choose_parent_dir() {
  struct stat st;
  if (::stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && ::access("/dev/shm", W_OK) == 0)
    return "/dev/shm";
  const char* tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

void empty_dir(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    std::filesystem::remove_all(e.path(), ec);
}

}  // namespace

std::vector<JobProcess> job_processes(const std::string& job_dir) {
  std::vector<JobProcess> out;
  DIR* proc = ::opendir("/proc");
  if (!proc) return out;
  const pid_t self = ::getpid();
  while (dirent* e = ::readdir(proc)) {
    const char* name = e->d_name;
    if (!*name || std::strspn(name, "0123456789") != std::strlen(name)) continue;
    const pid_t pid = static_cast<pid_t>(std::atol(name));
    if (pid == self) continue;
    const std::string base = std::string("/proc/") + name;
    // A zombie's environment reads empty: only live processes match.
    const std::string env = read_proc_file(base + "/environ");
    bool marked = false;
    if (env_value(env, kJobVariable, &marked) != job_dir || !marked) continue;
    JobProcess p;
    p.pid = pid;
    bool has_rank = false;
    const std::string rank = env_value(env, "OMPI_COMM_WORLD_RANK", &has_rank);
    if (has_rank && !rank.empty()) p.rank = std::atoi(rank.c_str());
    if (const std::optional<ProcStat> st = read_proc_stat(base)) p.state = st->state;
    if (p.state == 'Z' || p.state == 'X') continue;
    out.push_back(p);
  }
  ::closedir(proc);
  return out;
}

int kill_job(const std::string& job_dir, int patience_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(patience_ms);
  std::vector<pid_t> killed;
  for (;;) {
    std::vector<JobProcess> left = job_processes(job_dir);
    if (left.empty()) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string pids;
      for (const JobProcess& p : left) pids += " " + std::to_string(p.pid);
      std::fprintf(stderr,
                   "braid launch: %zu process(es) of the job would not die after SIGKILL:%s\n",
                   left.size(), pids.c_str());
      break;
    }
    for (const JobProcess& p : left) {
      if (::kill(p.pid, SIGKILL) == 0 &&
          std::find(killed.begin(), killed.end(), p.pid) == killed.end())
        killed.push_back(p.pid);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return static_cast<int>(killed.size());
}

JobGuard::JobGuard() {
  std::string templ =
      choose_parent_dir() + "/braid-launch." + std::to_string(::getpid()) + ".XXXXXX";
  BRAID_CHECK(::mkdtemp(templ.data()) != nullptr, "launch: cannot make the job's directory ", templ,
              ": ", std::strerror(errno));
  dir_ = templ;
  int fds[2];
  BRAID_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "launch: pipe failed: ", std::strerror(errno));
  guardian_ = ::fork();
  BRAID_CHECK(guardian_ >= 0, "launch: fork failed: ", std::strerror(errno));
  if (guardian_ == 0) {
    ::close(fds[1]);
    ::setsid();
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP}) ::signal(sig, SIG_IGN);
    sigset_t none;
    sigemptyset(&none);
    ::pthread_sigmask(SIG_SETMASK, &none, nullptr);
    if (int null = ::open("/dev/null", O_RDWR); null >= 0) {
      ::dup2(null, 0);
      ::dup2(null, 1);
      ::close(null);
    }
    char c = 0;
    ssize_t n;
    while ((n = ::read(fds[0], &c, 1)) < 0 && errno == EINTR) {
    }
    if (n == 1) ::_exit(0);  // the launcher cleaned up itself
    // End of file: the launcher is gone.
    const int killed = kill_job(dir_);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    if (killed > 0)
      std::fprintf(stderr,
                   "braid launch: the launcher died; killed the %d process(es) of its job\n",
                   killed);
    ::_exit(0);
  }
  ::close(fds[0]);
  to_guardian_ = fds[1];
}

int JobGuard::end_attempt() {
  const int killed = kill_job(dir_);
  empty_dir(dir_);
  return killed;
}

JobGuard::~JobGuard() {
  end_attempt();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
  if (to_guardian_ >= 0) {
    const char done = 'q';
    [[maybe_unused]] ssize_t n = ::write(to_guardian_, &done, 1);
    ::close(to_guardian_);
  }
  if (guardian_ > 0)
    while (::waitpid(guardian_, nullptr, 0) < 0 && errno == EINTR) {
    }
}

}  // namespace braid::launch
