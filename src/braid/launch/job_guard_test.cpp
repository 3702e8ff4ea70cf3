// Note [Job leftovers]: JobGuard finds the job's processes by their mark and leaves nothing
// behind, whether the launcher ends normally or is SIGKILLed.
#include "braid/launch/job_guard.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace braid::launch {
namespace {

namespace fs = std::filesystem;

// Starts `sleep 30` marked as rank `rank` of the job in `dir`.
pid_t start_marked_sleep(const std::string& dir, int rank) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv(kJobVariable, dir.c_str(), 1);
    setenv("OMPI_COMM_WORLD_RANK", std::to_string(rank).c_str(), 1);
    execlp("sleep", "sleep", "30", static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Waits up to `seconds` for `done`.
template <typename F>
bool eventually(double seconds, F done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

TEST(JobGuard, EndsWhatAnAttemptLeftAndEmptiesItsDirectory) {
  std::string dir;
  {
    JobGuard guard;
    dir = guard.dir();
    ASSERT_TRUE(fs::is_directory(dir));
    EXPECT_NE(dir.find("/braid-launch."), std::string::npos) << dir;
    std::ofstream(dir + "/vader_segment.vm.0.1234.0") << "segment";
    fs::create_directories(dir + "/ompi.vm.0/pid.1");
    const pid_t pid = start_marked_sleep(dir, 3);
    ASSERT_TRUE(eventually(5, [&] { return job_processes(dir).size() == 1; }));
    const JobProcess p = job_processes(dir).front();
    EXPECT_EQ(p.pid, pid);
    EXPECT_EQ(p.rank, 3);
    EXPECT_EQ(job_processes(dir + "x").size(), 0u);  // another job's mark
    EXPECT_EQ(guard.end_attempt(), 1);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    EXPECT_TRUE(fs::is_directory(dir));
    EXPECT_TRUE(fs::is_empty(dir));
    EXPECT_EQ(guard.end_attempt(), 0);
  }
  EXPECT_FALSE(fs::exists(dir));
}

TEST(JobGuard, ItsGuardianCleansUpAfterAKilledLauncher) {
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {  // a launcher: its guard, a rank, then waits to be killed
    close(report[0]);
    JobGuard guard;
    std::ofstream(guard.dir() + "/vader_segment.vm.0.1234.1") << "segment";
    start_marked_sleep(guard.dir(), 1);
    const std::string dir = guard.dir() + "\n";
    if (write(report[1], dir.data(), dir.size()) < 0) _exit(1);
    for (;;) pause();
  }
  close(report[1]);
  std::string dir;
  char c;
  while (read(report[0], &c, 1) == 1 && c != '\n') dir += c;
  close(report[0]);
  ASSERT_FALSE(dir.empty());
  ASSERT_TRUE(eventually(5, [&] { return job_processes(dir).size() == 1; }));
  const auto t0 = std::chrono::steady_clock::now();
  kill(launcher, SIGKILL);
  waitpid(launcher, nullptr, 0);
  EXPECT_TRUE(eventually(2, [&] { return job_processes(dir).empty() && !fs::exists(dir); }))
      << job_processes(dir).size() << " process(es) left, " << dir
      << (fs::exists(dir) ? " still there" : " removed");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 2.0);
}

}  // namespace
}  // namespace braid::launch
