// ShmEngine's one-copy collectives (Note [One-copy collectives]).
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "braid/comm/chunking.h"
#include "braid/comm/shm/shm_engine.h"
#include "braid/core/error.h"

namespace braid::comm {

// Note [One-copy collectives]
// Through the slots every byte of a broadcast is copied twice: by the root into its slot, by each
// peer out of it, a slot (256 KiB) at a time with a barrier between. Where the ranks can read
// and write each other's buffers (PeerMemory: threads of one process, or processes the kernel
// lets do so with process_vm_readv / process_vm_writev, "cross-memory attach", as MPI's vader
// does for its large messages) a large broadcast is copied once instead, by both sides at once:
//   1. every rank publishes the address of its buffer in its control block and arrives at a
//      barrier;
//   2. the root pushes the first 1/w of its buffer into every peer's buffer, while each peer
//      pulls the other (w - 1)/w from the root's: each side copies about as much (the root
//      (w - 1) n / w in all, each peer (w - 1) n / w), each in one system call;
//   3. a second barrier: no rank returns, and so changes or frees its buffer, while a peer may
//      still be copying from or into it.
// With 2 ranks on one host (2-core AMD EPYC, 2026-11-28) this took a 1 MiB broadcast from 104 us
// to 44 and 32 MiB from 3.8 ms to 2.7-3.1 (raw MPI with cma 79 us and 5.8 ms); the peer pulling
// everything itself was only as fast as MPI (one core copying, where the slots keep two busy).
// Below kOneCopyMinBytes the slots are as fast (the bytes stay in cache, one barrier) and such
// ops may run inline (can_start). all_gather stays on the slots: each rank pulling its peers'
// chunks (both cores copying already) measured 0.7-0.95x of the slots from 512 KiB to 64 MiB.
// docs/benchmarks.md "One-copy broadcast on a host".
bool ShmEngine::one_copy(const CollectiveOp& op) const {
  return peers_ != PeerMemory::slots && op.type == OpType::broadcast &&
         static_cast<int64_t>(op.out.nbytes()) >= kOneCopyMinBytes;
}

void ShmEngine::copy_peer(const CollectiveOp& op, int peer, char* local, uint64_t remote,
                          int64_t bytes, bool push) const {
  if (bytes <= 0) return;
  if (peers_ == PeerMemory::shared) {
    auto* there = reinterpret_cast<char*>(remote);
    std::memcpy(push ? there : local, push ? local : there, static_cast<size_t>(bytes));
    return;
  }
  const pid_t pid = ctl(peer).pid.load(std::memory_order_relaxed);
  while (bytes > 0) {
    iovec here{local, static_cast<size_t>(bytes)};
    iovec there{reinterpret_cast<void*>(remote), static_cast<size_t>(bytes)};
    const ssize_t got = push ? process_vm_writev(pid, &here, 1, &there, 1, 0)
                             : process_vm_readv(pid, &here, 1, &there, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      throw CommError(detail::concat(
          op.describe(), ": ", push ? "writing to" : "reading", " rank ", peer, "'s buffer (pid ",
          pid, push ? ", process_vm_writev" : ", process_vm_readv",
          ") failed: ", got < 0 ? std::strerror(errno) : "nothing copied"));
    local += got;
    remote += static_cast<uint64_t>(got);
    bytes -= got;
  }
}

void ShmEngine::broadcast_one_copy(const CollectiveOp& op) {
  char* data = bytes_of(op.out);
  const auto es = static_cast<int64_t>(dtype_size(op.out.dtype()));
  const int64_t bytes = op.out.numel() * es;
  const int64_t pushed = chunk_of(op.out.numel(), size_, 0).size * es;
  ctl(rank_).source.store(reinterpret_cast<uint64_t>(data), std::memory_order_relaxed);
  barrier(op);  // publishes every rank's buffer
  if (rank_ == op.root) {
    for (int j = 0; j < size_; ++j)
      if (j != rank_)
        copy_peer(op, j, data, ctl(j).source.load(std::memory_order_relaxed), pushed, true);
  } else {
    copy_peer(op, op.root, data + pushed,
              ctl(op.root).source.load(std::memory_order_relaxed) + static_cast<uint64_t>(pushed),
              bytes - pushed, false);
  }
  barrier(op);  // every copy from or into this rank's buffer is done
}

}  // namespace braid::comm
