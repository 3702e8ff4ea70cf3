// HierEngine: all_reduce for a group that spans hosts with several of its ranks on a host
// (Note [Hierarchical all_reduce]): shared memory inside each host, one message stream between
// hosts, the same bits as one host.
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
  // host_group: this rank's host's ranks, a shared-memory group.
  HierEngine(MPI_Comm comm, int rank, HostLayout layout, std::shared_ptr<ProcessGroup> host_group,
             std::function<void()> progress);
  ~HierEngine();

  // all_reduce of f32 with any reduce op (other types keep the flat algorithm: their rank-order
  // accumulator is wider than the data, and the partial sums would have to travel wide).
  static bool handles(const CollectiveOp& op);
  void run(const CollectiveOp& op, Clock::time_point deadline);

 private:
  void wait(std::vector<MPI_Request>& reqs, const std::vector<int>& peers, const CollectiveOp& op,
            Clock::time_point deadline, const char* what);
  void wait_host(const std::shared_ptr<class Work>& work, std::vector<MPI_Request>& sends);

  MPI_Comm comm_;
  int rank_;
  HostLayout layout_;
  std::shared_ptr<ProcessGroup> host_;
  std::function<void()> progress_;
  int host_index_ = 0;
  std::vector<int> leaders_;  // the first rank of each host
  std::vector<float> inbox_;  // the previous host's partial results, one chunk at a time
};

}  // namespace braid::comm
