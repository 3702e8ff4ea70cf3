// LocalGroup: the local backend. Ranks are threads of one process sharing a LocalHub; the
// collectives are ShmEngine's, so unit tests under TSan exercise the same code (and the same
// summation order) as the MPI backend on one node.
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "braid/comm/local/local_hub.h"
#include "braid/comm/process_group.h"
#include "braid/comm/shm/shm_engine.h"

namespace braid::comm {

class LocalGroup : public ProcessGroup {
 public:
  static constexpr size_t kDefaultSlotBytes = 256 << 10;

  // One group per rank, for `size` threads to use (rank r uses element r).
  static std::vector<std::shared_ptr<ProcessGroup>> create(int size,
                                                           ProcessGroupOptions options = {});

  LocalGroup(std::shared_ptr<LocalHub> hub, int rank, ProcessGroupOptions options);
  ~LocalGroup() override;

  std::string backend() const override { return "local"; }

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
  struct PendingRecv {
    CollectiveOp op;
    std::shared_ptr<Work> work;
    Clock::time_point deadline;
  };

  std::shared_ptr<LocalHub> hub_;
  ShmEngine engine_;
  std::deque<PendingRecv> recvs_;  // comm thread (Note [Inline collectives])
};

}  // namespace braid::comm
