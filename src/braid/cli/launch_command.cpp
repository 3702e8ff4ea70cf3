// braid launch -n N [options] -- PROGRAM [ARGS...]
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "braid/cli/command.h"
#include "braid/cli/command_line.h"
#include "braid/cli/option_values.h"
#include "braid/config/accelerate_config.h"
#include "braid/core/error.h"
#include "braid/launch/launcher.h"

namespace {

constexpr const char* kDescription =
    "Starts N ranks of PROGRAM through mpirun (here, across a hostfile's hosts, or inside a Slurm "
    "allocation, whose hosts mpirun takes itself). PROGRAM 'braid' means this braid. Everything "
    "after -- is the program's, passed on untouched.";
constexpr const char* kFooter =
    "Exits with the failing rank's status and prints a one-line cause.\n"
    "Under Slurm you may also skip the launcher: srun -n N braid ... (srun --mpi=pmix).";

std::string self_path() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "braid";
  return std::string(buf, static_cast<size_t>(n));
}

// Note [mpirun's -np]: -n is also spelt -np (mpirun's) and --nprocs. CLI11 names a one-dash option
// with one letter and would read -np as -n with the value "p", so -np becomes -n before parsing;
// --nprocs too, so that the errors name -n whichever was typed (CLI11 names an option by its long
// name). Only up to the `--`: the program's arguments are never touched.
std::vector<std::string> with_plain_nprocs(std::vector<std::string> args) {
  for (auto& a : args) {
    if (a == "--") break;
    if (a == "-np" || a == "--nprocs") a = "-n";
  }
  return args;
}

int run_launch(const std::vector<std::string>& args) {
  using braid::cli::integer;
  using braid::cli::number;
  braid::cli::CommandLine cl("launch", kDescription, kFooter, "-- PROGRAM [ARGS...]");
  CLI::App& app = cl.app();
  braid::launch::LaunchOptions o;
  std::string config_file;
  bool no_tag = false;
  const CLI::Option* nprocs =
      app.add_option("-n", o.nprocs,
                     "ranks, also -np or --nprocs (default: the config file's num_processes, "
                     "SLURM_NTASKS inside a Slurm allocation, else 1)")
          ->type_name("N")
          ->transform(integer<int>());
  app.add_option("--config_file,--config-file", config_file,
                 "HF Accelerate's config (accelerate config): num_processes from it, and every "
                 "rank's braid train reads it (as --accelerate-config F)")
      ->type_name("F");
  app.add_option("--hostfile", o.hostfile, "hosts and slots, as mpirun reads them")->type_name("F");
  app.add_option("--launch-agent", o.launch_agent,
                 "starts ranks on the other hosts in ssh's place (A HOST COMMAND)")
      ->type_name("A");
  app.add_option("--network", o.network,
                 "the job's network, CIDRs or interfaces: MPI's traffic uses only it and every "
                 "listener binds there (default: loopback on one host; the local networks that "
                 "reach a hostfile's hosts)")
      ->type_name("NET");
  app.add_option("--max-restarts", o.max_restarts,
                 "restart the whole job up to K times after a failure")
      ->type_name("K")
      ->transform(integer<int>())
      ->capture_default_str();
  app.add_option("--timeout", o.comm_timeout_s,
                 "collective timeout of every rank in seconds (BRAID_COMM_TIMEOUT)")
      ->type_name("S")
      ->transform(number());
  app.add_option("--job-timeout", o.job_timeout_s, "end the job after S seconds")
      ->type_name("S")
      ->transform(number());
  app.add_option("--threads", o.threads, "compute threads per rank (default: cores / ranks here)")
      ->type_name("T")
      ->transform(integer<int>());
  app.add_flag("--no-tag", no_tag, "do not prefix output lines with [rank R]");
  app.add_option("--single-copy", o.single_copy,
                 "how MPI moves large messages between a host's ranks: auto (default: cma where "
                 "every rank is here and the kernel permits it), cma (one kernel copy: pipelines' "
                 "and ring attention's messages arrive sooner) or none (shared buffers: MPI's "
                 "own collectives' fastest here)")
      ->type_name("MECH")
      ->check(braid::cli::one_of({"auto", "none", "cma"}));
  braid::cli::repeatable(
      app.add_option("--mpirun-arg", o.mpirun_args, "pass ARG to mpirun (repeatable)")
          ->type_name("ARG"));
  cl.pass_through(o.command);
  if (auto status = cl.parse(with_plain_nprocs(args))) return *status;
  o.tag_output = !no_tag;
  BRAID_CHECK(!o.command.empty(), "no program given: braid launch -n N -- PROGRAM [ARGS...]");
  bool nprocs_given = nprocs->count() > 0;
  if (!config_file.empty()) {
    const auto acc = braid::config::accelerate_launch_settings(config_file);
    BRAID_CHECK(acc.num_machines == 1 || !o.hostfile.empty(), config_file, ": num_machines ",
                acc.num_machines,
                ": braid starts every machine's ranks from here through mpirun; give their hosts "
                "with --hostfile");
    if (!nprocs_given && acc.num_processes > 0) {
      o.nprocs = acc.num_processes;
      nprocs_given = true;
    }
    // Every rank reads the file (braid train --accelerate-config); the launcher forwards
    // BRAID_* variables to the ranks.
    char abs[PATH_MAX];
    BRAID_CHECK(realpath(config_file.c_str(), abs), "--config_file: cannot read '", config_file,
                "'");
    setenv(braid::config::kAccelerateConfigEnv, abs, 1);
  }
  if (!nprocs_given) o.nprocs = braid::launch::default_nprocs();
  if (o.command[0] == "braid") o.command[0] = self_path();
  // Note [Job network listeners]: the guard is built beside this binary.
  const std::string self = self_path();
  const std::string guard = self.substr(0, self.rfind('/') + 1) + "libbraid_netguard.so";
  if (access(guard.c_str(), R_OK) == 0) o.netguard = guard;
  return braid::launch::launch(o);
}

}  // namespace

BRAID_COMMAND("launch", "start N ranks of a program through mpirun", run_launch);
