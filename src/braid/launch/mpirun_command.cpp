// What `braid launch` starts (launcher.h): mpirun's command line, the environment the ranks
// get, and the job's network (Note [Job network]). launcher.cpp runs it.
#include "braid/launch/launcher.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "braid/core/error.h"
#include "braid/launch/job_guard.h"
#include "braid/launch/single_copy.h"

namespace braid::launch {

namespace {

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
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
  // OMPI_COMM_WORLD_LOCAL_SIZE itself (launch/threads.h).
  if (threads <= 0 && o.hostfile.empty()) threads = std::max(1, cores / std::max(1, o.nprocs));
  if (threads > 0) {
    env["BRAID_NUM_THREADS"] = std::to_string(threads);
    env["OMP_NUM_THREADS"] = std::to_string(threads);
  }
  // More threads than cores here: OpenMP's threads that spin at a barrier would take the time
  // slices other ranks need; passive ones sleep. `braid launch -n 2 --threads 2` of
  // bench-small-ddp on 2 cores: 2741 tokens/s against 945 spinning (2026-11-26, AMD EPYC); one
  // thread a rank never spins, so -n 4 ran alike. The user's own setting wins.
  const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
  if (threads > 0 && int64_t{threads} * o.nprocs > cores && !(wait_policy && *wait_policy))
    env["OMP_WAIT_POLICY"] = "passive";
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
  if (!o.job_dir.empty()) env[kJobVariable] = o.job_dir;
  if (geteuid() == 0) {
    env["OMPI_ALLOW_RUN_AS_ROOT"] = "1";
    env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1";
  }
  return env;
}

std::vector<std::string> mpirun_command(const LaunchOptions& o, const std::string& mpirun,
                                        const std::map<std::string, std::string>& env) {
  // Note [Single copy]: braid's own collectives on a host run over its shared-memory window,
  // whatever MPI does; MPI's large messages are the pipeline's activations and gradients, ring
  // attention's key/value blocks and MPI's own collectives (the raw baseline of `braid bench
  // comm`). "cma" delivers a 393 KB pipeline message in one copy instead of 32 KB fragments that
  // each wait for both comm threads' next poll: bench-pipeline's bubble at m = 8 was 3.2%
  // against 14.1% (zb_v) and 7.4-7.9% against 9.7-11.7% (zb_h1), 4-12% more tokens/s; ring
  // attention's hops waited 60 ms of a step instead of 194 (bench/plan_accuracy.sh). "none"
  // keeps MPI_Allreduce at its fastest here (2 ranks, 2-core AMD EPYC, 2026-11-26: 9.7 us at 64
  // KiB against 21.4 with cma), so `braid bench comm` compares with raw MPI under
  // --single-copy none. launch() resolves the default, "auto", to cma where every rank is on this
  // host and the kernel permits the copy (single_copy.h: Yama, seccomp and capabilities may
  // not), else none.
  const std::string single_copy = resolved_single_copy(o);  // launch() resolved it once already
  BRAID_CHECK(single_copy == "none" || single_copy == "cma", "braid launch: --single-copy '",
              o.single_copy, "', expected auto, none or cma");
  std::vector<std::string> cmd = {
      mpirun, "-np",   std::to_string(o.nprocs),          "--oversubscribe", "--bind-to",
      "none", "--mca", "btl_vader_single_copy_mechanism", single_copy};
  if (o.tag_output) cmd.push_back("--tag-output");
  // Note [Job leftovers]: the shared-memory segments (btl vader, and osc sm's windows) and the
  // session directory in the job's own directory, which the launcher empties after every
  // attempt; only when every rank is here, as the other hosts have no such directory.
  if (!o.job_dir.empty() && all_ranks_here(o))
    cmd.insert(cmd.end(),
               {"--mca", "btl_vader_backing_directory", o.job_dir, "--mca",
                "osc_sm_backing_directory", o.job_dir, "--mca", "orte_tmpdir_base", o.job_dir});
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

bool all_ranks_here(const LaunchOptions& o) {
  if (!o.hostfile.empty()) return hostfile_networks(o.hostfile) == kLoopbackNetwork;
  const char* nodes = std::getenv("SLURM_JOB_NUM_NODES");
  return !(nodes && std::strtol(nodes, nullptr, 10) > 1);
}

// Note [Job network]: a job's traffic rides the networks that join its hosts (one host:
// loopback, kLoopbackNetwork): MPI's
// bootstrap (oob) and data (btl) use only them (if_include), the TCP transport's IPv6 is off, and
// its listening sockets bind there too. OpenMPI itself binds every listener to the wildcard
// address whatever if_include says, so the launcher preloads libbraid_netguard.so into mpirun,
// the daemons and the ranks (Note [Job network listeners], launch/netguard/netguard.cpp). braid
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

}  // namespace braid::launch
