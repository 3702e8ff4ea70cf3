// braid launch -n N [--hostfile F] [--launch-agent A] [--network NET] [--max-restarts K] [--timeout
// S] [--job-timeout S]
//              [--threads T] [--no-tag] [--mpirun-arg ARG]... -- PROGRAM ARGS...
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "braid/cli/args.h"
#include "braid/cli/command.h"
#include "braid/config/accelerate_config.h"
#include "braid/core/error.h"
#include "braid/launch/launcher.h"

namespace {

const char* kUsage =
    "usage: braid launch -n N [options] -- PROGRAM [ARGS...]\n"
    "Starts N ranks of PROGRAM through mpirun (here, across a hostfile's hosts, or inside a\n"
    "Slurm allocation, whose hosts mpirun takes itself). PROGRAM 'braid' means this braid.\n"
    "  -n N               ranks (default: the config file's num_processes, SLURM_NTASKS inside\n"
    "                     a Slurm allocation, else 1)\n"
    "  --config_file F    HF Accelerate's config (accelerate config): num_processes from it,\n"
    "                     and every rank's braid train reads it (as --accelerate-config F)\n"
    "  --hostfile F       hosts and slots, as mpirun reads them\n"
    "  --launch-agent A   starts ranks on the other hosts in ssh's place (A HOST COMMAND)\n"
    "  --network NET      the job's network, CIDRs or interfaces: MPI's traffic uses only it\n"
    "                     and every listener binds there (default: loopback on one host; the\n"
    "                     local networks that reach a hostfile's hosts)\n"
    "  --max-restarts K   restart the whole job up to K times after a failure (default 0)\n"
    "  --timeout S        collective timeout of every rank in seconds (BRAID_COMM_TIMEOUT)\n"
    "  --job-timeout S    end the job after S seconds\n"
    "  --threads T        compute threads per rank (default: cores / ranks here)\n"
    "  --no-tag           do not prefix output lines with [rank R]\n"
    "  --mpirun-arg ARG   pass ARG to mpirun (repeatable)\n"
    "Exits with the failing rank's status and prints a one-line cause.\n"
    "Under Slurm you may also skip the launcher: srun -n N braid ... (srun --mpi=pmix).\n";

std::string self_path() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "braid";
  return std::string(buf, static_cast<size_t>(n));
}

int run_launch(const std::vector<std::string>& args) {
  braid::launch::LaunchOptions o;
  bool nprocs_given = false;
  std::string config_file;
  size_t i = 0;
  auto value = [&]() -> const std::string& {
    BRAID_CHECK(i + 1 < args.size(), args[i], " needs a value (see braid launch --help)");
    return args[++i];
  };
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      o.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      break;
    } else if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return 0;
    } else if (a == "-n" || a == "-np" || a == "--nprocs") {
      o.nprocs = braid::cli::parse_int32(a, value());
      nprocs_given = true;
    } else if (a == "--hostfile") {
      o.hostfile = value();
    } else if (a == "--config_file" || a == "--config-file") {
      config_file = value();
    } else if (a == "--launch-agent") {
      o.launch_agent = value();
    } else if (a == "--network") {
      o.network = value();
    } else if (a == "--max-restarts") {
      o.max_restarts = braid::cli::parse_int32(a, value());
    } else if (a == "--timeout") {
      o.comm_timeout_s = braid::cli::parse_number(a, value());
    } else if (a == "--job-timeout") {
      o.job_timeout_s = braid::cli::parse_number(a, value());
    } else if (a == "--threads") {
      o.threads = braid::cli::parse_int32(a, value());
    } else if (a == "--no-tag") {
      o.tag_output = false;
    } else if (a == "--mpirun-arg") {
      o.mpirun_args.push_back(value());
    } else {
      BRAID_THROW("unknown option '", a, "' (the program goes after --; see braid launch --help)");
    }
  }
  BRAID_CHECK(!o.command.empty(), "no program given: braid launch -n N -- PROGRAM [ARGS...]");
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
