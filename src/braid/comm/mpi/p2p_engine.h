// P2pEngine: collectives over MPI point-to-point messages, for groups whose ranks are not all on
// one node. Every wait polls non-blocking requests against the deadline, so nothing blocks
// forever, and a timeout names the ranks whose messages never came.
//
// Algorithms (direct exchange, fine for the tens of ranks of a CPU job): reduce_scatter sends
// chunk j to rank j, which reduces the w contributions in rank order with reduce_ranks (so the
// bits equal the shm transport's); all_reduce is reduce_scatter then all_gather; broadcast is a
// direct send from the root. Dead processes are reported by the launcher: mpirun and srun end
// the job when a rank dies.
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "braid/comm/mpi/hier_engine.h"
#include "braid/comm/op.h"

namespace braid::comm {

class P2pEngine {
 public:
  using Clock = std::chrono::steady_clock;

  // comm is private to this engine. debug: exchange fingerprints before every collective.
  // charge(bytes) is told of every growth of the memory kept between collectives before it
  // happens (Note [Group memory], process_group.h); it may throw OutOfMemory.
  // layout names the ranks' hosts in errors.
  P2pEngine(MPI_Comm comm, int rank, int size, bool debug, std::function<void()> progress,
            std::function<void(int64_t)> charge, HostLayout layout);

  void run(const CollectiveOp& op, Clock::time_point deadline);

 private:
  void post_send(const void* data, int64_t bytes, int peer, int tag);
  void post_recv(void* data, int64_t bytes, int peer, int tag);
  void wait_all(const CollectiveOp& op);  // throws CommError on timeout or MPI error
  void check_fingerprints(const CollectiveOp& op);
  std::string host_suffix(int r) const;  // " on host h2", or "" when hosts are unknown
  void reduce_scatter_into(const CollectiveOp& op, const char* in, char* out, int64_t n);
  void all_gather_into(const CollectiveOp& op, const char* in, char* out, int64_t n, int tag);
  int tag(const CollectiveOp& op, int phase) const;

  MPI_Comm comm_;
  int rank_;
  int size_;
  bool debug_;
  std::function<void()> progress_;
  std::function<void(int64_t)> charge_;
  HostLayout layout_;
  std::vector<MPI_Request> reqs_;
  std::vector<int> req_peer_;            // peer of each request; negative for sends (-1 - peer)
  std::vector<char> scratch_;            // reduce_scatter contributions, kept between calls
  std::vector<CollectiveOp> abandoned_;  // ops whose requests were left in flight by a failure
  Clock::time_point deadline_;
  Clock::time_point started_;
};

}  // namespace braid::comm
