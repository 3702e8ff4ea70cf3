// Fault scenarios as real processes, driven by fault_test.sh (which checks exit codes, timing and
// messages). Usage: comm_fault_mpi_test SCENARIO [NONCE]
//   skip      the last rank skips the 2nd all_reduce and stays busy; the others time out (2 s)
//   kill      the last rank SIGKILLs itself in the middle of a 16 MiB all_reduce
//   kill_bcast  ... in the middle of 16 MiB broadcasts from rank 0 (one copy between the ranks'
//             buffers where they can reach each other: Note [One-copy collectives])
//   mismatch  debug mode; the last rank all-reduces 1000 elements where the others use 1024
//   ok        no fault (the driver's sanity check)
// A rank that gets past its scenario prints "rank R: finished cleanly", which must never happen
// in a fault scenario.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "braid/comm/world.h"

namespace {

using namespace braid;
using namespace braid::comm;

void run(ProcessGroup& world, const std::string& scenario) {
  const int last = world.size() - 1;
  const bool culprit = world.rank() == last;
  if (scenario == "skip") {
    Tensor x = Tensor::full(Shape{1024}, 1);
    for (int k = 0; k < 3; ++k) {
      if (k == 1 && culprit) {
        std::this_thread::sleep_for(std::chrono::seconds(60));  // "stuck in compute"
        continue;
      }
      world.all_reduce(x)->wait();
    }
  } else if (scenario == "kill" || scenario == "kill_bcast") {
    Tensor x = Tensor::full(Shape{4 << 20}, 1);
    if (culprit) {
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        kill(getpid(), SIGKILL);
      }).detach();
    }
    for (int k = 0; k < 100000; ++k) {
      if (scenario == "kill")
        world.all_reduce(x)->wait();
      else
        world.broadcast(x, 0)->wait();
    }
  } else if (scenario == "mismatch") {
    Tensor x = Tensor::full(Shape{culprit ? 1000 : 1024}, 1);
    world.all_reduce(x)->wait();
    world.all_reduce(x)->wait();
  } else if (scenario == "ok") {
    Tensor x = Tensor::full(Shape{1024}, 1);
    for (int k = 0; k < 3; ++k) world.all_reduce(x)->wait();
  } else {
    throw Error("unknown scenario '" + scenario + "'");
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string scenario = argc > 1 ? argv[1] : "ok";
  ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(2);
  options.debug = scenario == "mismatch";
  int rank = -1;
  try {
    auto world = init_world(options);
    rank = world->rank();
    run(*world, scenario);
    world->barrier()->wait();
    std::printf("rank %d: finished cleanly\n", rank);
    return 0;
  } catch (const std::exception& e) {
    // The CLI's one line; destroying the world then aborts the job (Note [Fatal comm errors]).
    std::fprintf(stderr, "rank %d: error: %s\n", rank, e.what());
    return 1;
  }
}
