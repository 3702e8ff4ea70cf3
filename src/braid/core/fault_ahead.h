// FaultAhead: a thread that faults in the pages of tensors a load is about to fill, on a core the
// load leaves idle (Note [Faulting in ahead]).
#pragma once

#include <atomic>
#include <thread>
#include <vector>

#include "braid/core/tensor.h"

namespace braid {

// Note [Faulting in ahead]: a large host allocation is a fresh mapping whose pages fault in,
// zeroed by the kernel, where they are first written (Note [Large host allocations],
// storage.cpp). A checkpoint load that fills 1.5 GB of a DDP replica's masters and optimizer
// state spends about 0.2 s of its core in those faults, while the machine's cores sit idle a
// third of the load waiting for the disk and the other replica. FaultAhead populates the pages
// of the tensors it is given, in order, 2 MiB at a time, with MADV_POPULATE_WRITE (which maps
// them writable without writing: bytes the load has already put there stay), so the load's own
// writes mostly find them present. Where the kernel lacks it (before Linux 5.14) the thread
// stops at its first refusal and the pages fault in as before; what it populates is the same
// memory the load would fault in, nothing more. The destructor stops it and waits.
// Used where a load fills more than it reads: a DDP replica's masters and state, a ZeRO-1/2
// rank's gathered units, and every rank's own optimizer state. gpt2-small on 2 ranks
// (docs/benchmarks.md "Faulting in ahead"): DDP load 0.626-0.672 s -> 0.577-0.633, ZeRO-1
// 0.678-0.687 -> 0.611-0.620; ZeRO-3, which fills no more than it reads and waits on the disk
// with its cores half idle, alike (0.618-0.641 against 0.624-0.647).
class FaultAhead {
 public:
  explicit FaultAhead(std::vector<Tensor> tensors);
  ~FaultAhead();  // stops the thread at its next step and waits
  void wait();    // until every page is populated (or the kernel refused)
  FaultAhead(const FaultAhead&) = delete;
  FaultAhead& operator=(const FaultAhead&) = delete;

  // Tensors smaller than this are left to fault in (a heap allocation, or not worth a step).
  static constexpr int64_t kMinBytes = int64_t{2} << 20;

 private:
  void run();

  std::vector<Tensor> tensors_;  // kept alive until the thread is done
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace braid
