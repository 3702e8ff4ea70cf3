#include "braid/launch/launcher.h"
#include "braid/launch/single_copy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "braid/core/error.h"
#include "braid/launch/job_guard.h"

namespace braid::launch {
namespace {

bool contains(const std::vector<std::string>& v, const std::vector<std::string>& seq) {
  return std::search(v.begin(), v.end(), seq.begin(), seq.end()) != v.end();
}

TEST(Launcher, MpirunCommandCarriesTheFlagsThisMachineNeeds) {
  LaunchOptions o;
  o.nprocs = 4;
  o.command = {"braid", "bench", "comm"};
  o.single_copy = "none";  // as launch() resolves "auto" (below)
  auto env = launch_environment(o, 2, 0);
  auto cmd = mpirun_command(o, "/usr/bin/mpirun", env);
  EXPECT_EQ(cmd[0], "/usr/bin/mpirun");
  EXPECT_TRUE(contains(cmd, {"-np", "4"}));
  EXPECT_TRUE(contains(cmd, {"--oversubscribe"}));
  EXPECT_TRUE(contains(cmd, {"--bind-to", "none"}));
  EXPECT_TRUE(contains(cmd, {"--mca", "btl_vader_single_copy_mechanism", "none"}));
  o.single_copy = "cma";
  EXPECT_TRUE(contains(mpirun_command(o, "/usr/bin/mpirun", env),
                       {"--mca", "btl_vader_single_copy_mechanism", "cma"}));
  o.single_copy = "xpmem";
  EXPECT_THROW(mpirun_command(o, "/usr/bin/mpirun", env), Error);
  o.single_copy = "none";
  EXPECT_TRUE(contains(cmd, {"--tag-output"}));
  EXPECT_TRUE(contains(cmd, {"-x", "BRAID_NUM_THREADS"}));
  EXPECT_TRUE(contains(cmd, {"braid", "bench", "comm"}));
  EXPECT_EQ(cmd.back(), "comm");
  // 2 cores over 4 ranks: one thread each, never zero, and they sleep at barriers (unless the
  // user set the policy).
  EXPECT_EQ(env.at("BRAID_NUM_THREADS"), "1");
  EXPECT_EQ(env.at("OMP_NUM_THREADS"), "1");
  if (!std::getenv("OMP_WAIT_POLICY")) {
    EXPECT_EQ(env.at("OMP_WAIT_POLICY"), "passive");
  }
  o.nprocs = 2;
  EXPECT_EQ(launch_environment(o, 2, 0).count("OMP_WAIT_POLICY"), 0u);  // a core each: spin
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
  // OpenMPI 4.1 says PID 0 for every rank it started here: the launcher names the pid it saw,
  // or says it is not known.
  EXPECT_EQ(c.cause(137),
            "process rank 1 (PID not known: it died before the launcher saw it) on node vm exited "
            "on signal 9 (Killed)");
  c.know_pid(0, 4241);
  c.know_pid(1, 4242);
  EXPECT_EQ(c.cause(137), "process rank 1 with PID 4242 on node vm exited on signal 9 (Killed)");
  c.observe("[rank 0] braid train: error: group 'world' rank 0: all_reduce seq 7 timed out");
  EXPECT_EQ(c.cause(1),
            "[rank 0] braid train: error: group 'world' rank 0: all_reduce seq 7 "
            "timed out");
  c.observe("[rank 2] braid: rank 2: aborting the job after a communication failure: boom");
  EXPECT_NE(c.cause(1).find("aborting the job"), std::string::npos);
  EXPECT_EQ(FailureCause().cause(3), "exit status 3 (no rank printed an error)");
}

// Note [Root cause first]: the abort line that names the culprit wins over an earlier one that
// only saw a healthy peer late (multihost_link-down, seen under load).
TEST(Launcher, CausePrefersTheAbortThatNamesTheCulprit) {
  FailureCause c;
  c.observe(
      "[rank 1] braid: rank 1: aborting the job after a communication failure: group "
      "'world/host' rank 1: broadcast seq 62 (f32, count 1, root 0) timed out after 4 s: ranks [0] "
      "never arrived");
  c.observe(
      "[rank 0] braid: rank 0: aborting the job after a communication failure: group 'world' "
      "rank 0: all_reduce seq 71 (f32, count 1, sum) timed out after 4 s: rank 2 (host h2) never "
      "sent the result");
  c.observe(
      "[rank 3] braid: rank 3: aborting the job after a communication failure: rank 2 (pid 7) "
      "died and never arrived");
  EXPECT_NE(c.cause(1).find("rank 2 (host h2) never sent the result"), std::string::npos)
      << c.cause(1);
}

// Note [Root cause first]: h2's link went down; rank 1 waited for its host's leader rank 0, which
// waited for rank 2 on h2, and rank 1 aborted first. Both name a host; rank 0's blames a rank that
// printed no abort of its own (multihost_link-down beside another MPI test, 2026-11-28).
TEST(Launcher, CausePrefersTheAbortWhoseCulpritIsNotWaitingItself) {
  const std::string waits_on_leader =
      "[rank 1] braid: rank 1: aborting the job after a communication failure: group 'world' rank "
      "1: all_reduce seq 68 (i64, count 4, sum) timed out after 4 s: ranks [0 on host h1] never "
      "arrived";
  const std::string waits_on_h2 =
      "[rank 0] braid: rank 0: aborting the job after a communication failure: group 'world' rank "
      "0: all_reduce seq 68 (i64, count 4, sum) timed out after 4 s: ranks [2 on host h2] never "
      "arrived";
  FailureCause c;
  c.observe(waits_on_leader);
  EXPECT_NE(c.cause(137).find("[0 on host h1]"), std::string::npos);  // all it knows yet
  c.observe(waits_on_h2);
  EXPECT_NE(c.cause(137).find("[2 on host h2]"), std::string::npos) << c.cause(137);
  // Either order; and with both hosts' ranks waiting on each other, the first stays.
  FailureCause d;
  d.observe(waits_on_h2);
  d.observe(waits_on_leader);
  EXPECT_NE(d.cause(137).find("[2 on host h2]"), std::string::npos) << d.cause(137);
  d.observe(
      "[rank 2] braid: rank 2: aborting the job after a communication failure: group 'world' rank "
      "2: all_reduce seq 68 (i64, count 4, sum) timed out after 4 s: ranks [0 on host h1] never "
      "arrived");
  EXPECT_NE(d.cause(137).find("[2 on host h2]"), std::string::npos) << d.cause(137);
}

// Note [Root cause first]: when host h2 is lost, an h1 rank may abort first because its
// shared-memory peer left; the lost host (named by another rank, or by mpirun) is the cause.
TEST(Launcher, CausePrefersALostHostOverARankThatLeft) {
  const std::string left =
      "[rank 1] braid: rank 1: aborting the job after a communication failure: group "
      "'world/host' rank 1: all_reduce seq 40 (f32, count 9, sum): rank 0 left the group";
  FailureCause by_mpirun;
  by_mpirun.observe(left);
  by_mpirun.observe("ORTE has lost communication with a remote daemon.");
  by_mpirun.observe("  HNP daemon   : [[1234,0],0] on node vm");
  by_mpirun.observe("  Remote daemon: [[1234,0],2] on node h2");
  EXPECT_EQ(by_mpirun.cause(1),
            "lost host h2: its daemon died or its network link went down (mpirun lost contact)");
  FailureCause by_rank;
  by_rank.observe(left);
  by_rank.observe(
      "[rank 0] braid: rank 0: aborting the job after a communication failure: group 'world' "
      "rank 0: recv from rank 2 on host h2 failed: connection reset");
  EXPECT_NE(by_rank.cause(1).find("on host h2"), std::string::npos) << by_rank.cause(1);
}

TEST(Launcher, CauseNamesAStoppedRankFirst) {
  // Rank 1 was SIGSTOPped; once mpirun resumed it to end the job, it blamed healthy rank 0.
  FailureCause c;
  c.observe(
      "[rank 0] braid train: error: group 'world' rank 0: all_reduce seq 57 timed out after "
      "2 s: ranks [1] stopped inside it");
  c.stopped(1, 23360);
  c.observe(
      "[rank 1] braid train: error: group 'world' rank 1: all_reduce seq 57 timed out after "
      "2.34 s: ranks [0] stopped inside it");
  const std::string why = c.cause(1);
  EXPECT_EQ(why.rfind("rank 1 (pid 23360) was stopped (SIGSTOP, or held by a debugger) when the "
                      "job began to fail: [rank 0] ",
                      0),
            0u)
      << why;
  EXPECT_EQ(why.find("ranks [0] stopped"), std::string::npos) << why;
}

TEST(Launcher, FollowsTheReportedStep) {
  FailureCause c;
  EXPECT_EQ(c.step(), -1);
  c.observe("[rank 0] resuming from /w/checkpoints/step-00000004 (step 4, 1.2 MiB)");
  EXPECT_EQ(c.step(), 4);
  c.observe("[rank 0] step     8/16 | loss 5.1 | lr 1e-3");
  EXPECT_EQ(c.step(), 8);
  c.observe("[rank 0] step 10 | checkpoint /w/checkpoints/step-00000010: 1 MiB in 0.1 s");
  EXPECT_EQ(c.step(), 10);
  c.observe("[rank 1] stepping 99");
  c.observe("step 12/16 | loss 4.0");  // --no-tag
  EXPECT_EQ(c.step(), 12);
}

// Note [Deterministic failures]
TEST(Launcher, TellsADeterministicFailure) {
  const std::string enospc =
      "[rank 1] braid train: error: checkpoint step 4: write rank-00001.bin: No space left";
  FailureCause first, second;
  first.observe("[rank 0] step 4/16 | loss 5.0");
  first.observe(enospc);
  first.observe("[rank 0] braid train: error: rank 1 failed to save step 4");
  // The same error at the same step, though another rank's line came first.
  second.observe("[rank 0] step 4/16 | loss 5.0");
  second.observe("[rank 0] braid train: error: rank 1 failed to save step 4");
  EXPECT_TRUE(second.repeats(first));
  // Progress: a later step.
  FailureCause later;
  later.observe("[rank 0] step 6/16 | loss 4.0");
  later.observe(enospc);
  EXPECT_FALSE(later.repeats(first));
  // Another error at the same step.
  FailureCause other;
  other.observe("[rank 0] step 4/16 | loss 5.0");
  other.observe("[rank 1] braid train: error: something else");
  EXPECT_FALSE(other.repeats(first));
  // A config error before any step, twice.
  FailureCause config1, config2;
  config1.observe("[rank 0] braid train: error: config: training.lr: 'x' is not a number");
  config2.observe("[rank 0] braid train: error: config: training.lr: 'x' is not a number");
  EXPECT_TRUE(config2.repeats(config1));
  // Deaths by a signal at the same step are never deterministic.
  FailureCause killed1, killed2;
  for (FailureCause* c : {&killed1, &killed2}) {
    c->observe("[rank 0] step 4/16 | loss 5.0");
    c->observe("mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9.");
  }
  EXPECT_FALSE(killed2.repeats(killed1));
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
  // Note [Root cause first]: a rank's abort that names no host does not beat the lost host; one
  // that names the host says more and wins.
  c.observe("[rank 0] braid: rank 0: aborting the job after a communication failure: x");
  EXPECT_EQ(c.cause(1).find("aborting the job"), std::string::npos) << c.cause(1);
  c.observe(
      "[rank 1] braid: rank 1: aborting the job after a communication failure: rank 2 (host h2) "
      "never sent the result");
  EXPECT_NE(c.cause(1).find("rank 2 (host h2) never sent"), std::string::npos) << c.cause(1);
}

// Note [Job leftovers]
TEST(Launcher, SharedMemoryFilesGoToTheJobsDirectory) {
  ::unsetenv("SLURM_JOB_NUM_NODES");
  LaunchOptions o;
  o.nprocs = 2;
  o.command = {"prog"};
  o.job_dir = "/dev/shm/braid-launch.1.abc";
  auto env = launch_environment(o, 2, 0);
  EXPECT_EQ(env.at(kJobVariable), o.job_dir);
  auto cmd = mpirun_command(o, "mpirun", env);
  EXPECT_TRUE(contains(cmd, {"--mca", "btl_vader_backing_directory", o.job_dir}));
  EXPECT_TRUE(contains(cmd, {"--mca", "osc_sm_backing_directory", o.job_dir}));
  EXPECT_TRUE(contains(cmd, {"--mca", "orte_tmpdir_base", o.job_dir}));
  // Other hosts have no such directory: OpenMPI's defaults there.
  o.hostfile = ::testing::TempDir() + "braid_hosts_elsewhere";
  std::ofstream(o.hostfile) << "no-such-host.invalid slots=2\n";
  EXPECT_FALSE(all_ranks_here(o));
  EXPECT_FALSE(contains(mpirun_command(o, "mpirun", env), {"--mca", "orte_tmpdir_base"}));
}

// Note [Single copy]: auto is cma where every rank is on this host and the kernel lets one
// process read another's memory (the probe), else none; explicit choices stay.
TEST(Launcher, SingleCopyAutoFollowsTheProbe) {
  LaunchOptions o;
  o.nprocs = 2;
  EXPECT_EQ(o.single_copy, "auto");
  EXPECT_EQ(resolved_single_copy(o), cma_permitted() ? "cma" : "none");
  o.hostfile = ::testing::TempDir() + "braid_hosts_for_single_copy";
  std::ofstream(o.hostfile) << "no-such-host.invalid slots=2\n";
  EXPECT_EQ(resolved_single_copy(o), "none");  // ranks elsewhere: vader's peers are not here
  for (const char* explicit_choice : {"none", "cma"}) {
    o.single_copy = explicit_choice;
    EXPECT_EQ(resolved_single_copy(o), explicit_choice);
  }
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
