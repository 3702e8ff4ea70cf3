#include "braid/comm/mpi/mpi_runtime.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "braid/core/error.h"

namespace braid::comm {

void mpi_check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw CommError(detail::concat(call, " failed: ", std::string(text, len)));
}

std::shared_ptr<MpiRuntime> MpiRuntime::acquire() {
  // MPI itself is process-wide state; this weak reference only mirrors it.
  static std::mutex mu;
  static std::weak_ptr<MpiRuntime> current;
  static bool created = false;
  std::lock_guard lock(mu);
  if (auto rt = current.lock()) return rt;
  if (created)
    throw CommError("MPI was already finalised in this process; keep one group alive instead");
  std::shared_ptr<MpiRuntime> rt(new MpiRuntime());
  current = rt;
  created = true;  // MPI cannot be initialised twice in one process
  return rt;
}

MpiRuntime::MpiRuntime() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    if (provided < MPI_THREAD_MULTIPLE)
      throw CommError(
          detail::concat("MPI provides thread level ", provided,
                         ", braid needs MPI_THREAD_MULTIPLE (each group runs on its own thread)"));
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
}

namespace {
// mpirun forwards a rank's output asynchronously and drops what it has not read when the job is
// aborted: give it a moment to take the error line first.
void abort_job() {
  std::fflush(stdout);
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  MPI_Abort(MPI_COMM_WORLD, 1);
}
}  // namespace

MpiRuntime::~MpiRuntime() {
  if (failed_.load()) {
    // The program may not have printed the error: unwinding to its handler destroys the group
    // (and so this runtime) before the handler runs.
    std::fprintf(stderr, "braid: rank %d: aborting the job after a communication failure: %s\n",
                 world_rank_, fatal_message_.c_str());
    abort_job();
    _exit(1);  // not reached
  }
  for (auto& f : frees_) f();
  MPI_Finalize();
}

void MpiRuntime::fatal(const std::string& message) {
  {
    std::lock_guard lock(mu_);
    if (failed_.load()) return;
    fatal_message_ = message;
    failed_.store(true);
  }
  int rank = world_rank_;
  std::thread([message, rank] {
    std::this_thread::sleep_for(std::chrono::milliseconds(kAbortGraceMs));
    std::fprintf(stderr, "braid: rank %d: aborting the job after a communication failure: %s\n",
                 rank, message.c_str());
    abort_job();
    _exit(1);
  }).detach();
}

void MpiRuntime::defer_free(std::function<void()> free_fn) {
  std::lock_guard lock(mu_);
  frees_.push_back(std::move(free_fn));
}

}  // namespace braid::comm
