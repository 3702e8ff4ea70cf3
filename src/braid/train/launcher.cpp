#include "braid/train/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "braid/core/error.h"

namespace braid::train {

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
  pid_t pid = fork();
  BRAID_CHECK(pid >= 0, "launch: fork failed: ", std::strerror(errno));
  if (pid == 0) {
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

// Every live descendant of `root` on this machine, from the parent pids in /proc. OpenMPI puts
// each rank in a process group of its own, so a process-group kill would miss them.
std::vector<pid_t> descendants(pid_t root) {
  std::multimap<pid_t, pid_t> children;  // parent -> child
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), {});
    size_t close_paren = stat.rfind(')');  // the command name may hold spaces and parens
    if (close_paren == std::string::npos) continue;
    std::istringstream fields(stat.substr(close_paren + 1));
    char state = 0;
    pid_t ppid = 0;
    if (fields >> state >> ppid) children.emplace(ppid, static_cast<pid_t>(std::stol(name)));
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
};

// Forwards the child's output line by line (retagged) until both pipes close; ends the job when
// it outlives the deadline or the launcher is signalled.
PumpResult pump(Child& c, const LaunchOptions& o, FailureCause& cause,
                const SignalCatcher& signals) {
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
        std::fprintf(sinks[i], "%s\n", line.c_str());
        if (cause.job_failing() && kill_at == Clock::time_point::max()) {
          // mpirun is ending the job; a host it cannot reach must not keep it (and us) waiting.
          kill_at = Clock::now() + kFailureGrace;
        }
      }
      std::fflush(sinks[i]);
    }
    if (o.job_timeout_s > 0 && !r.timed_out && r.interrupted == 0 &&
        std::chrono::duration<double>(Clock::now() - start).count() > o.job_timeout_s) {
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
  r.status = WIFEXITED(status)     ? WEXITSTATUS(status)
             : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                   : 1;
  return r;
}

}  // namespace

std::string find_on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string candidate = p.substr(start, end - start) + "/" + name;
    if (end > start && access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

std::map<std::string, std::string> launch_environment(const LaunchOptions& o, int cores,
                                                      int attempt) {
  std::map<std::string, std::string> env;
  int threads = o.threads;
  // With a hostfile the ranks per node are unknown here; each rank divides its node's cores by
  // OMPI_COMM_WORLD_LOCAL_SIZE itself (train/threads.h).
  if (threads <= 0 && o.hostfile.empty()) threads = std::max(1, cores / std::max(1, o.nprocs));
  if (threads > 0) {
    env["BRAID_NUM_THREADS"] = std::to_string(threads);
    env["OMP_NUM_THREADS"] = std::to_string(threads);
  }
  if (o.comm_timeout_s > 0) env["BRAID_COMM_TIMEOUT"] = format_seconds(o.comm_timeout_s);
  if (!o.network.empty() && !o.netguard.empty()) {
    const char* preload = std::getenv("LD_PRELOAD");
    env["LD_PRELOAD"] = o.netguard + (preload && *preload ? std::string(":") + preload : "");
    env["BRAID_JOB_NETWORK"] = o.network;
    // A sanitizer-built program refuses a library preloaded before its runtime; the guard only
    // wraps bind(), so let it run.
    const char* asan = std::getenv("ASAN_OPTIONS");
    env["ASAN_OPTIONS"] =
        std::string(asan && *asan ? std::string(asan) + ":" : "") + "verify_asan_link_order=0";
  }
  env["BRAID_RESTART_COUNT"] = std::to_string(attempt);
  if (geteuid() == 0) {
    env["OMPI_ALLOW_RUN_AS_ROOT"] = "1";
    env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1";
  }
  return env;
}

std::vector<std::string> mpirun_command(const LaunchOptions& o, const std::string& mpirun,
                                        const std::map<std::string, std::string>& env) {
  std::vector<std::string> cmd = {mpirun, "-np", std::to_string(o.nprocs), "--oversubscribe",
                                  "--bind-to", "none",
                                  // Measured faster here than CMA single-copy (bench comm).
                                  "--mca", "btl_vader_single_copy_mechanism", "none"};
  if (o.tag_output) cmd.push_back("--tag-output");
  if (!o.hostfile.empty()) cmd.insert(cmd.end(), {"--hostfile", o.hostfile});
  if (!o.launch_agent.empty())
    cmd.insert(cmd.end(),
               {"--mca", "plm_rsh_agent", o.launch_agent, "--mca", "plm_rsh_no_tree_spawn", "1"});
  if (!o.network.empty()) {
    // Note [Job network]: bootstrap (oob) and data (btl) over the job's network only, IPv4 only.
    cmd.insert(cmd.end(), {"--mca", "oob_tcp_if_include", o.network, "--mca", "btl_tcp_if_include",
                           o.network, "--mca", "btl_tcp_disable_family", "6"});
    // The daemons on the other hosts start with the guard too; the ranks inherit it.
    if (!o.netguard.empty())
      cmd.insert(cmd.end(),
                 {"--mca", "orte_launch_agent",
                  "env LD_PRELOAD=" + o.netguard + " BRAID_JOB_NETWORK=" + o.network + " orted"});
  }
  // Local ranks inherit the environment; remote ones get what -x names.
  for (const auto& [k, v] : env)
    if (k.rfind("OMPI_", 0) != 0) cmd.insert(cmd.end(), {"-x", k});
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    std::string k = kv.substr(0, kv.find('='));
    if (k.rfind("BRAID_", 0) == 0 && !env.count(k)) cmd.insert(cmd.end(), {"-x", k});
  }
  cmd.insert(cmd.end(), o.mpirun_args.begin(), o.mpirun_args.end());
  cmd.insert(cmd.end(), o.command.begin(), o.command.end());
  return cmd;
}

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

void FailureCause::observe(const std::string& line) {
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
      "process rank [0-9]+ with PID [0-9]+ on node \\S+ exited on "
      "signal [0-9]+[^.]*|process rank [0-9]+ .*exited.*");
  if (line.find("aborting the job after a communication failure") != std::string::npos) {
    if (abort_line_.empty()) abort_line_ = line;
  } else if (line.rfind("[rank ", 0) == 0 &&
             (line.find("error") != std::string::npos || line.find("Error") != std::string::npos)) {
    if (rank_error_.empty()) rank_error_ = line;
  } else if (mpirun_line_.empty()) {
    std::smatch m;
    if (std::regex_search(line, m, noticed)) mpirun_line_ = m.str();
  }
}

std::string FailureCause::cause(int exit_status) const {
  if (!abort_line_.empty()) return abort_line_;
  if (!host_line_.empty()) return host_line_;
  if (!rank_error_.empty()) return rank_error_;
  if (!mpirun_line_.empty()) return mpirun_line_;
  return "exit status " + std::to_string(exit_status) + " (no rank printed an error)";
}

int default_nprocs() {
  const char* job = std::getenv("SLURM_JOB_ID");
  const char* tasks = std::getenv("SLURM_NTASKS");
  if (!job || !tasks) return 1;
  char* end = nullptr;
  long n = std::strtol(tasks, &end, 10);
  BRAID_CHECK(end != tasks && *end == '\0' && n >= 1 && n <= INT_MAX, "launch: SLURM_NTASKS='",
              tasks, "' is not a task count (give -n N)");
  return static_cast<int>(n);
}

namespace {

struct Ipv4Net {
  uint32_t addr = 0, mask = 0;  // host byte order
};

std::vector<Ipv4Net> local_networks() {
  std::vector<Ipv4Net> nets;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return nets;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || !i->ifa_netmask || i->ifa_addr->sa_family != AF_INET) continue;
    nets.push_back({ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr),
                    ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr)});
  }
  freeifaddrs(list);
  return nets;
}

std::string cidr(const Ipv4Net& n) {
  in_addr a{htonl(n.addr & n.mask)};
  char text[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &a, text, sizeof text);
  return std::string(text) + "/" + std::to_string(__builtin_popcount(n.mask));
}

}  // namespace

std::string default_network(const std::string& hostfile) {
  if (!hostfile.empty()) return hostfile_networks(hostfile);
  // mpirun takes the hosts of a Slurm allocation of several nodes itself: their network is not
  // known here (give --network).
  const char* nodes = std::getenv("SLURM_JOB_NUM_NODES");
  if (nodes && std::strtol(nodes, nullptr, 10) > 1) return "";
  return kLoopbackNetwork;
}

// Note [Job network]: a job's traffic rides the networks that join its hosts (one host:
// loopback, kLoopbackNetwork): MPI's
// bootstrap (oob) and data (btl) use only them (if_include), the TCP transport's IPv6 is off, and
// its listening sockets bind there too. OpenMPI itself binds every listener to the wildcard
// address whatever if_include says, so the launcher preloads libbraid_netguard.so into mpirun,
// the daemons and the ranks (Note [Job network listeners], train/netguard/netguard.cpp). braid
// opens no port of its own. Who may connect on the job's own network is a firewall's matter
// (the ports can be pinned: --mpirun-arg --mca --mpirun-arg btl_tcp_port_min_v4 ...).
std::string hostfile_networks(const std::string& hostfile) {
  std::ifstream in(hostfile);
  if (!in) return "";
  const auto nets = local_networks();
  std::vector<std::string> chosen;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line.substr(0, line.find('#')));
    std::string host;
    if (!(words >> host)) continue;
    addrinfo hints{};
    hints.ai_family = AF_INET;
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return "";
    const uint32_t ip = ntohl(reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr.s_addr);
    freeaddrinfo(res);
    std::string found;
    for (const auto& n : nets)
      if (n.mask != 0 && (ip & n.mask) == (n.addr & n.mask) && (ip >> 24) != 127) found = cidr(n);
    if ((ip >> 24) == 127) continue;  // this machine: any of its networks will do
    if (found.empty()) return "";
    if (std::find(chosen.begin(), chosen.end(), found) == chosen.end()) chosen.push_back(found);
  }
  // Every host is this machine: the job stays on loopback.
  if (chosen.empty()) return kLoopbackNetwork;
  std::string out;
  for (const auto& c : chosen) out += (out.empty() ? "" : ",") + c;
  return out;
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
  SignalCatcher signals;
  int status = 0;
  for (int attempt = 0; attempt <= o.max_restarts; ++attempt) {
    auto env = launch_environment(o, cores, attempt);
    std::vector<std::string> argv = mpirun.empty() ? o.command : mpirun_command(o, mpirun, env);
    LaunchOptions local = o;
    if (mpirun.empty()) local.tag_output = false;
    Child child = spawn(argv, env, signals.original_mask());
    FailureCause cause;
    PumpResult r = pump(child, local, cause, signals);
    status = r.status;
    if (r.interrupted) {
      // Stopped from outside: not a failure to retry. The status says which signal.
      std::fprintf(stderr, "braid launch: interrupted by %s; the job stopped (exit %d)\n",
                   signal_name(r.interrupted).c_str(), status);
      return 128 + r.interrupted;
    }
    if (status == 0) return 0;
    std::string why =
        r.timed_out ? "the job ran past --job-timeout " + format_seconds(o.job_timeout_s) + " s"
                    : cause.cause(status);
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
  }
  return status;
}

}  // namespace braid::train
