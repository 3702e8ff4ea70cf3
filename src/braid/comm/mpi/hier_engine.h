// HierEngine: all_reduce for a group that spans hosts with several of its ranks on a host
// (Note [Hierarchical all_reduce]): shared memory inside each host, one message stream between
// hosts, the same bits as one host.
//
// Note [Host group on the caller]: the engine runs on the group's comm thread and waits for
// every host collective it issues. Handed to the host group's own comm thread, each one costs
// two wake-ups, and on oversubscribed cores (4 ranks' threads on 2 cores) a wake-up can wait
// out another thread's time slice: a 512 KiB all_reduce across 2 hosts x 2 ranks spent 350-500
// us in a host reduce_scatter that takes 30 us alone. So the scattered chain's host collectives
// go to a synchronous host group (ProcessGroupOptions::synchronous: each runs whole on the
// calling thread): its 512 KiB all_reduce took 780-800 us instead of 1000-1140. The pipelined
// chain keeps the asynchronous group: while its host reduces chunk c + 1, the engine's thread
// keeps the MPI sends of chunk c moving (on the caller, 16 MiB took 40-45 ms instead of 28).
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/comm/op.h"

namespace braid::comm {

class ProcessGroup;

// Where a group's ranks live: host_of[r] is the index of rank r's host, hosts numbered in the
// order of their first rank; names[h] is that host's processor name.
struct HostLayout {
  std::vector<int> host_of;
  std::vector<std::string> names;
  int hosts() const { return static_cast<int>(names.size()); }
  // Every host's ranks are consecutive and some host holds two or more of them.
  bool hierarchical() const;
  std::string rank_name(int r) const;  // "rank 2 (host h2)"
  std::string describe() const;        // "2 hosts: h1 ranks 0-1, h2 ranks 2-3"; "" for none
};

class HierEngine {
 public:
  using Clock = std::chrono::steady_clock;

  // comm: a private duplicate of the group's communicator (leaders' messages);
  // host_group, host_now: this rank's host's ranks, shared-memory groups, the second
  // synchronous (Note [Host group on the caller]).
  HierEngine(MPI_Comm comm, int rank, HostLayout layout, std::shared_ptr<ProcessGroup> host_group,
             std::shared_ptr<ProcessGroup> host_now, std::function<void()> progress);
  ~HierEngine();

  // all_reduce of f32 with any reduce op (other types keep the flat algorithm: their rank-order
  // accumulator is wider than the data, and the partial sums would have to travel wide).
  static bool handles(const CollectiveOp& op);
  void run(const CollectiveOp& op, Clock::time_point deadline);

  // Buffers of at most this many floats take the scattered chain when every host holds the same
  // number of ranks, two or more (Note [Scattered chain], hier_scattered.cpp).
  // 1 MiB: at 2 MiB the pipelined chain measured as fast or faster.
  static constexpr int64_t kScatteredMaxFloats = int64_t{1} << 18;

 private:
  enum Phase { kForward = 0, kResult = 1 };
  static int tag_of(const CollectiveOp& op, Phase phase);

  void run_scattered(const CollectiveOp& op, Clock::time_point deadline);
  void wait(std::vector<MPI_Request>& reqs, const std::vector<int>& peers, const CollectiveOp& op,
            Clock::time_point deadline, const char* what);
  void wait_host(const std::shared_ptr<class Work>& work, std::vector<MPI_Request>& sends);

  MPI_Comm comm_;
  int rank_;
  HostLayout layout_;
  std::shared_ptr<ProcessGroup> host_;
  std::shared_ptr<ProcessGroup> host_now_;
  std::function<void()> progress_;
  int host_index_ = 0;
  std::vector<int> leaders_;  // the first rank of each host
  int ranks_per_host_ = 0;    // every host's rank count when they are equal, else 0
  std::vector<float> inbox_;  // the previous host's partial results, one chunk at a time
};

}  // namespace braid::comm
