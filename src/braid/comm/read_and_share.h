// ReadAndShare: a load in which each rank reads part of what the ranks hold and shares it with
// the others (Note [Ranged loads], parallel/step.h), each part's collective issued as soon as
// it is read.
//
// Note [Shared as read]: a DDP replica reads the parameters and optimizer state it owns and
// broadcasts them, a ZeRO-1/2 rank reads its piece of each unit and all-gathers it; issued after
// every read, the collectives' copies ran with the disk idle (gpt2-small under ddp on 2 ranks:
// 0.66-1.1 s of a 1.0 s load reading and broadcasting the optimizer state one after the other).
// Here each part's collective is issued (on the group's thread) as soon as its reader has it,
// so it runs while the next part is read. A read that fails is kept, not thrown: the failing
// rank goes on issuing the same collectives in the same order (sending whatever its buffers
// hold), so no rank waits in one for it, and finish() lets every rank know after the last one
// (all_ranks_or_throw), as the reads that came before them all did; what was received is thrown
// away with the load.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <vector>

#include "braid/comm/process_group.h"

namespace braid::comm {

class ReadAndShare {
 public:
  // group: the ranks that share (null or one rank: reads only).
  explicit ReadAndShare(ProcessGroup* group) : group_(group) {}

  // Runs `read` (not after a read of this rank has failed), then issues `share` on every rank,
  // in the same order on each: the collective that hands what was read to the others.
  void step(const std::function<void()>& read,
            const std::function<std::shared_ptr<Work>(ProcessGroup&)>& share);
  // Waits for every collective, then throws on every rank if a read failed on any: the failing
  // rank its own error, the others one naming it (all_ranks_or_throw).
  void finish();

 private:
  ProcessGroup* group_;
  std::exception_ptr failed_;
  std::vector<std::shared_ptr<Work>> works_;
};

}  // namespace braid::comm
