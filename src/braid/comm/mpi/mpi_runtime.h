// MpiRuntime: MPI's process-wide lifetime. MPI can be initialised once per process, so this is
// the one process-wide object in comm/: every MPI group holds a shared_ptr to it, and the last
// one to go finalises MPI (or aborts the job after a fatal error, Note [Fatal comm errors]).
#pragma once

#include <mpi.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace braid::comm {

// Note [Fatal comm errors]: after a collective times out, a peer dies or ranks disagree, MPI's
// state is unknown (requests in flight, peers stuck in blocking MPI calls), so the job cannot
// continue and MPI_Finalize could hang. The failing op's Work rethrows a CommError, so the
// program can report it and unwind; when the runtime is released after that it calls MPI_Abort
// instead of MPI_Finalize, and a watchdog thread aborts anyway after kAbortGrace, in case the
// program never waits on the failed Work. mpirun then ends every rank with a non-zero status.
class MpiRuntime {
 public:
  static constexpr int kAbortGraceMs = 2000;

  static std::shared_ptr<MpiRuntime> acquire();  // MPI_Init_thread(MULTIPLE) on first use
  ~MpiRuntime();

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }

  // Records a fatal error and starts the abort watchdog (once).
  void fatal(const std::string& message);
  bool failed() const { return failed_.load(); }

  // Frees run at finalisation in creation order, the same on every rank, so collective frees
  // (MPI_Win_free, MPI_Comm_free) cannot deadlock across groups.
  void defer_free(std::function<void()> free_fn);

 private:
  MpiRuntime();

  int world_rank_ = 0;
  int world_size_ = 1;
  std::atomic<bool> failed_{false};
  std::string fatal_message_;  // guarded by mu_ until failed_ is set, then constant
  std::mutex mu_;
  std::vector<std::function<void()>> frees_;
};

// Throws CommError naming the call when an MPI function does not return MPI_SUCCESS.
void mpi_check(int rc, const char* call);

}  // namespace braid::comm
