// MpiGroup: the MPI backend. Ranks are processes started by mpirun/srun (`braid launch`).
// When every rank of the group is on one node (MPI_COMM_TYPE_SHARED), collectives run on a
// ShmEngine over an MPI-3 shared window (transport "mpi/shm"); otherwise over non-blocking
// point-to-point messages (P2pEngine, "mpi/p2p"). BRAID_COMM_TRANSPORT=shm|p2p forces one.
// send/recv always use MPI_Isend/MPI_Irecv on a communicator of their own.
#pragma once

#include <mpi.h>

#include <deque>
#include <memory>
#include <vector>

#include "braid/comm/mpi/hier_engine.h"
#include "braid/comm/mpi/mpi_runtime.h"
#include "braid/comm/mpi/p2p_engine.h"
#include "braid/comm/process_group.h"
#include "braid/comm/shm/shm_engine.h"

namespace braid::comm {

class MpiGroup : public ProcessGroup {
 public:
  static constexpr size_t kDefaultSlotBytes = 256 << 10;

  // comm becomes the group's own (freed at MPI finalisation). Collective over comm.
  MpiGroup(std::shared_ptr<MpiRuntime> runtime, MPI_Comm comm, ProcessGroupOptions options);
  ~MpiGroup() override;

  std::string backend() const override {
    return shm_ ? "mpi/shm" : hier_ ? "mpi/p2p+hier" : "mpi/p2p";
  }
  MPI_Comm comm() const { return comm_; }
  // How the shared-memory transport reads the peers' buffers (Note [One-copy collectives]):
  // cma where the kernel lets the ranks read each other, else (and on p2p) slots.
  PeerMemory peer_memory() const { return peers_; }
  std::string placement() const override { return layout_.describe(); }
  std::vector<int> host_of_ranks() const override { return layout_.host_of; }

 protected:
  void run_collective(const CollectiveOp& op, Clock::time_point deadline) override;
  bool can_run_inline(const CollectiveOp& op) const override;
  bool start_inline(const CollectiveOp& op, Clock::time_point deadline) override;
  void finish_inline(const CollectiveOp& op) override;
  void start_p2p(const CollectiveOp& op, std::shared_ptr<Work> work,
                 Clock::time_point deadline) override;
  bool poll_p2p() override;
  void fail_p2p(const std::string& why) override;
  std::shared_ptr<ProcessGroup> make_subgroup(int color, const std::vector<int>& members,
                                              uint64_t seq, ProcessGroupOptions options) override;
  void on_fatal(const std::string& message) override;

 private:
  size_t options_slot_bytes() const;
  // Where the ranks live (collective over comm_); node: this rank's shared-memory communicator.
  HostLayout host_layout(
      MPI_Comm node) const;  // options, else BRAID_COMM_SHM_SLOT_BYTES, else default

  struct PendingP2p {
    CollectiveOp op;
    std::shared_ptr<Work> work;
    Clock::time_point deadline;
    std::vector<MPI_Request> reqs;
  };

  std::shared_ptr<MpiRuntime> runtime_;
  MPI_Comm comm_;
  MPI_Comm p2p_comm_ = MPI_COMM_NULL;
  MPI_Win win_ = MPI_WIN_NULL;
  std::unique_ptr<ShmEngine> shm_;
  PeerMemory peers_ = PeerMemory::slots;
  std::unique_ptr<P2pEngine> p2p_;
  std::unique_ptr<HierEngine> hier_;     // all_reduce across hosts (Note [Hierarchical all_reduce])
  HostLayout layout_;                    // filled when the group spans hosts
  std::deque<PendingP2p> pending_;       // comm thread (Note [Inline collectives])
  std::vector<CollectiveOp> abandoned_;  // failed p2p whose requests MPI may still own
};

}  // namespace braid::comm
