// The launcher behind `braid launch`: starts N ranks of a program through mpirun, here or across
// the hosts of a hostfile (inside a Slurm allocation mpirun takes its hosts from Slurm), with what
// mpirun needs on this kind of machine: running as root, more ranks than cores, no core binding,
// the faster shared-memory copy. Each rank gets cores / ranks compute threads unless told
// otherwise (BRAID_NUM_THREADS, OMP_NUM_THREADS; launch/threads.h), output lines carry their rank,
// a failed job is restarted up to max_restarts times (not when it fails the same way twice:
// Note [Deterministic failures]), and the result is the failing rank's exit status plus a
// one-line cause (failure_cause.h). Nothing of the job outlives the launcher, killed or not
// (job_guard.h). Without mpirun, a 1-rank job runs the program directly.
// launcher.cpp runs the job (its output, failure cause, signals and restarts); mpirun_command.cpp
// builds what it runs (mpirun's command line, the ranks' environment, the job's network).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "braid/launch/failure_cause.h"

namespace braid::launch {

struct LaunchOptions {
  int nprocs = 1;
  std::string hostfile;      // mpirun --hostfile
  std::string launch_agent;  // starts a program on another host, in ssh's place (plm_rsh_agent)
  // The job's network (CIDRs or interfaces, comma-separated): MPI's bootstrap and data traffic
  // use only it and every listener binds there (Note [Job network]). Empty: default_network().
  std::string network;
  // libbraid_netguard.so, preloaded into mpirun, the daemons and the ranks when network is set so
  // their listeners bind only there (Note [Job network listeners]); empty: not preloaded.
  std::string netguard;
  int max_restarts = 0;       // whole-job restarts after a failure
  double comm_timeout_s = 0;  // collective timeout for the ranks (BRAID_COMM_TIMEOUT); 0: keep
  double job_timeout_s = 0;   // end the job after this long; 0: never
  int threads = 0;            // compute threads per rank; 0: cores / ranks (local runs)
  bool tag_output = true;     // prefix every output line with "[rank R] "
  // Note [Single copy]: how MPI moves a large message between two ranks of a host (OpenMPI's
  // btl_vader_single_copy_mechanism): "none" (through shared buffers), "cma" (one copy by the
  // kernel, process_vm_readv) or "auto" (cma where every rank is on this host and the kernel
  // permits it, else none: single_copy.h).
  std::string single_copy = "auto";
  // The job's private directory (JobGuard, set by launch()): its processes carry it in
  // kJobVariable, and when every rank runs on this host OpenMPI's shared-memory segments and
  // session directory go there (Note [Job leftovers]). Empty: neither.
  std::string job_dir;
  std::vector<std::string> mpirun_args;  // passed through to mpirun before the program
  std::vector<std::string> command;      // PROGRAM ARGS...
};

// The environment the ranks get (added to the launcher's own).
std::map<std::string, std::string> launch_environment(const LaunchOptions& o, int cores,
                                                      int attempt);
// The full mpirun command line for o (o.network already resolved).
std::vector<std::string> mpirun_command(const LaunchOptions& o, const std::string& mpirun,
                                        const std::map<std::string, std::string>& env);

// Rewrites mpirun's "[1,3]<stderr>:text" into "[rank 3] text"; other lines are unchanged.
std::string retag_line(const std::string& line);

// The ranks of a job given no -n: SLURM_NTASKS inside a Slurm allocation, else 1.
int default_nprocs();

// Whether every rank runs on this host: no hostfile and no Slurm allocation of several nodes, or
// a hostfile of this machine only.
bool all_ranks_here(const LaunchOptions& o);

// The local IPv4 networks ("10.0.0.0/24,...") through which this machine reaches every host of
// a hostfile (kLoopbackNetwork when every host is this machine), or "" when some host does not
// resolve or no local interface's network holds it.
std::string hostfile_networks(const std::string& hostfile);

// One host's job network: its listeners bind to 127.0.0.1 (and ::1), reachable from nowhere else.
inline constexpr const char* kLoopbackNetwork = "127.0.0.0/8";

// The job's network when none is given: with a hostfile, hostfile_networks(); inside a Slurm
// allocation of several nodes, "" (unrestricted: mpirun finds the hosts itself); else one host,
// kLoopbackNetwork.
std::string default_network(const std::string& hostfile);

// Runs the job (with restarts); returns the exit status to exit with.
int launch(const LaunchOptions& o);

// Finds an executable on PATH ("" if absent).
std::string find_on_path(const std::string& name);

}  // namespace braid::launch
