#include "braid/launch/launcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "braid/core/error.h"

namespace braid::launch {
namespace {

bool contains(const std::vector<std::string>& v, const std::vector<std::string>& seq) {
  return std::search(v.begin(), v.end(), seq.begin(), seq.end()) != v.end();
}

TEST(Launcher, MpirunCommandCarriesTheFlagsThisMachineNeeds) {
  LaunchOptions o;
  o.nprocs = 4;
  o.command = {"braid", "bench", "comm"};
  auto env = launch_environment(o, 2, 0);
  auto cmd = mpirun_command(o, "/usr/bin/mpirun", env);
  EXPECT_EQ(cmd[0], "/usr/bin/mpirun");
  EXPECT_TRUE(contains(cmd, {"-np", "4"}));
  EXPECT_TRUE(contains(cmd, {"--oversubscribe"}));
  EXPECT_TRUE(contains(cmd, {"--bind-to", "none"}));
  EXPECT_TRUE(contains(cmd, {"--mca", "btl_vader_single_copy_mechanism", "none"}));
  EXPECT_TRUE(contains(cmd, {"--tag-output"}));
  EXPECT_TRUE(contains(cmd, {"-x", "BRAID_NUM_THREADS"}));
  EXPECT_TRUE(contains(cmd, {"braid", "bench", "comm"}));
  EXPECT_EQ(cmd.back(), "comm");
  // 2 cores over 4 ranks: one thread each, never zero.
  EXPECT_EQ(env.at("BRAID_NUM_THREADS"), "1");
  EXPECT_EQ(env.at("OMP_NUM_THREADS"), "1");
}

TEST(Launcher, ThreadsTimeoutAndHostfile) {
  LaunchOptions o;
  o.nprocs = 2;
  o.command = {"prog"};
  EXPECT_EQ(launch_environment(o, 16, 0).at("BRAID_NUM_THREADS"), "8");
  o.threads = 3;
  o.comm_timeout_s = 2.5;
  auto env = launch_environment(o, 16, 1);
  EXPECT_EQ(env.at("BRAID_NUM_THREADS"), "3");
  EXPECT_EQ(env.at("BRAID_COMM_TIMEOUT"), "2.5");
  EXPECT_EQ(env.at("BRAID_RESTART_COUNT"), "1");
  // With a hostfile each rank divides its own node's cores (launch/threads.h).
  o.threads = 0;
  o.hostfile = "hosts";
  EXPECT_EQ(launch_environment(o, 16, 0).count("BRAID_NUM_THREADS"), 0u);
  EXPECT_TRUE(contains(mpirun_command(o, "mpirun", {}), {"--hostfile", "hosts"}));
}

TEST(Launcher, RetagsMpirunOutput) {
  EXPECT_EQ(retag_line("[1,3]<stderr>:braid train: error: x"), "[rank 3] braid train: error: x");
  EXPECT_EQ(retag_line("[12,0]<stdout>:step 10"), "[rank 0] step 10");
  EXPECT_EQ(retag_line("[not a tag] text"), "[not a tag] text");
  EXPECT_EQ(retag_line("plain"), "plain");
}

TEST(Launcher, CausePrefersTheRanksOwnError) {
  FailureCause c;
  c.observe("[rank 1] step 3 loss 2.5");
  c.observe(
      "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 "
      "(Killed).");
  EXPECT_EQ(c.cause(137), "process rank 1 with PID 0 on node vm exited on signal 9 (Killed)");
  c.observe("[rank 0] braid train: error: group 'world' rank 0: all_reduce seq 7 timed out");
  EXPECT_EQ(c.cause(1),
            "[rank 0] braid train: error: group 'world' rank 0: all_reduce seq 7 "
            "timed out");
  c.observe("[rank 2] braid: rank 2: aborting the job after a communication failure: boom");
  EXPECT_NE(c.cause(1).find("aborting the job"), std::string::npos);
  EXPECT_EQ(FailureCause().cause(3), "exit status 3 (no rank printed an error)");
}

TEST(Launcher, CauseNamesALostHost) {
  FailureCause c;
  c.observe("[rank 0] step 3 loss 2.5");
  EXPECT_FALSE(c.job_failing());
  c.observe("ORTE has lost communication with a remote daemon.");
  c.observe("");
  c.observe("  HNP daemon   : [[7583,0],0] on node vm");
  c.observe("  Remote daemon: [[7583,0],2] on node h2");
  EXPECT_TRUE(c.job_failing());
  EXPECT_EQ(c.cause(205),
            "lost host h2: its daemon died or its network link went down (mpirun lost contact)");
  // A rank's own abort line says more and wins.
  c.observe("[rank 0] braid: rank 0: aborting the job after a communication failure: x");
  EXPECT_NE(c.cause(1).find("aborting the job"), std::string::npos);
}

TEST(Launcher, HostsAgentAndNetwork) {
  LaunchOptions o;
  o.nprocs = 4;
  o.command = {"prog"};
  o.hostfile = "hosts";
  o.launch_agent = "/x/rsh";
  o.network = "10.77.0.0/24";
  auto cmd = mpirun_command(o, "mpirun", {});
  EXPECT_TRUE(contains(cmd, {"--mca", "plm_rsh_agent", "/x/rsh"}));
  EXPECT_TRUE(contains(cmd, {"--mca", "oob_tcp_if_include", "10.77.0.0/24"}));
  EXPECT_TRUE(contains(cmd, {"--mca", "btl_tcp_if_include", "10.77.0.0/24"}));
  EXPECT_TRUE(contains(cmd, {"--mca", "btl_tcp_disable_family", "6"}));
  // The listener guard: preloaded into mpirun and the ranks, and into the remote daemons.
  EXPECT_EQ(launch_environment(o, 2, 0).count("LD_PRELOAD"), 0u);  // no guard given
  o.netguard = "/x/libbraid_netguard.so";
  auto env = launch_environment(o, 2, 0);
  EXPECT_EQ(env.at("LD_PRELOAD").rfind("/x/libbraid_netguard.so", 0), 0u);
  EXPECT_EQ(env.at("BRAID_JOB_NETWORK"), "10.77.0.0/24");
  // Sanitizer builds accept the preloaded guard.
  EXPECT_NE(env.at("ASAN_OPTIONS").find("verify_asan_link_order=0"), std::string::npos);
  EXPECT_TRUE(contains(mpirun_command(o, "mpirun", env),
                       {"--mca", "orte_launch_agent",
                        "env LD_PRELOAD=/x/libbraid_netguard.so BRAID_JOB_NETWORK=10.77.0.0/24 "
                        "orted"}));
  // A hostfile of this machine only: loopback; an unknown host: no network to confine to.
  const std::string local = ::testing::TempDir() + "braid_hosts_local";
  std::ofstream(local) << "# comment\nlocalhost slots=2\n127.0.0.1 slots=2\n";
  EXPECT_EQ(hostfile_networks(local), kLoopbackNetwork);
  EXPECT_EQ(default_network(local), kLoopbackNetwork);
  const std::string unknown = ::testing::TempDir() + "braid_hosts_unknown";
  std::ofstream(unknown) << "no-such-host.invalid slots=2\n";
  EXPECT_EQ(hostfile_networks(unknown), "");
}

TEST(Launcher, OneHostStaysOnLoopback) {
  ::unsetenv("SLURM_JOB_NUM_NODES");
  EXPECT_EQ(default_network(""), kLoopbackNetwork);
  ::setenv("SLURM_JOB_NUM_NODES", "1", 1);
  EXPECT_EQ(default_network(""), kLoopbackNetwork);
  // Several nodes of an allocation: mpirun finds them itself; no network is assumed.
  ::setenv("SLURM_JOB_NUM_NODES", "3", 1);
  EXPECT_EQ(default_network(""), "");
  ::unsetenv("SLURM_JOB_NUM_NODES");
}

TEST(Launcher, RanksFromSlurm) {
  ::unsetenv("SLURM_JOB_ID");
  ::setenv("SLURM_NTASKS", "6", 1);
  EXPECT_EQ(default_nprocs(), 1);  // not inside an allocation
  ::setenv("SLURM_JOB_ID", "42", 1);
  EXPECT_EQ(default_nprocs(), 6);
  ::setenv("SLURM_NTASKS", "six", 1);
  EXPECT_THROW(default_nprocs(), Error);
  ::unsetenv("SLURM_JOB_ID");
  ::unsetenv("SLURM_NTASKS");
}

TEST(Launcher, RejectsBadOptions) {
  LaunchOptions o;
  EXPECT_THROW(launch(o), Error);  // no program
  o.command = {"true"};
  o.nprocs = 0;
  EXPECT_THROW(launch(o), Error);
  // A program that cannot be started: one line saying why, before mpirun runs.
  o.nprocs = 2;
  auto error_of = [&o](std::vector<std::string> command) {
    o.command = std::move(command);
    try {
      launch(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(error_of({"/no/such/program"}).find("cannot start '/no/such/program': no such file"),
            std::string::npos);
  EXPECT_NE(error_of({"no-such-program-braid", "x"})
                .find("cannot start 'no-such-program-braid': not found on PATH"),
            std::string::npos);
  const std::string text = ::testing::TempDir() + "braid_launch_not_executable.txt";
  std::ofstream(text) << "not a program\n";
  std::filesystem::permissions(
      text, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  EXPECT_NE(error_of({text}).find("cannot start '" + text + "': not executable"),
            std::string::npos);
}

TEST(Launcher, FindsProgramsOnPath) {
  EXPECT_FALSE(find_on_path("sh").empty());
  EXPECT_TRUE(find_on_path("no-such-program-braid").empty());
}

}  // namespace
}  // namespace braid::launch
