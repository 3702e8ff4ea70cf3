// ShmEngine's one-copy collectives (Note [One-copy collectives]).
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "braid/comm/chunking.h"
#include "braid/comm/shm/shm_engine.h"
#include "braid/core/error.h"

namespace braid::comm {

// Note [One-copy collectives]
// Through the slots every byte of a broadcast or all_gather is copied twice: by its owner into
// the owner's slot, by each reader out of it. Where a rank can read its peers' own buffers
// (PeerMemory: threads of one process, or processes the kernel lets read each other with
// process_vm_readv, "cross-memory attach", as MPI's vader does for its large messages) a large
// one is copied once instead:
//   1. every rank publishes the address of its source (broadcast: the root's buffer;
//      all_gather: its input) in its control block and arrives at a barrier;
//   2. every rank copies what it lacks straight from the peers' sources into its output;
//   3. a second barrier: no rank returns, and so changes or frees its source, while a peer may
//      still read it.
// Two barriers instead of one a slot's worth of bytes, no slot staging, and a process_vm_readv
// copies a whole buffer in one system call. Below kOneCopyMinBytes the slots are as fast (the
// bytes stay in cache, one barrier) and such ops may run inline (can_start). Measured with 2
// ranks on one host: docs/benchmarks.md "One-copy broadcast and all_gather on a host".
bool ShmEngine::one_copy(const CollectiveOp& op) const {
  if (peers_ == PeerMemory::slots) return false;
  if (op.type != OpType::broadcast) return false;
  return static_cast<int64_t>(op.out.nbytes()) >= kOneCopyMinBytes;
}

void ShmEngine::read_peer(const CollectiveOp& op, int peer, char* dst, uint64_t src,
                          int64_t bytes) const {
  if (bytes <= 0) return;
  if (peers_ == PeerMemory::shared) {
    std::memcpy(dst, reinterpret_cast<const void*>(src), static_cast<size_t>(bytes));
    return;
  }
  const pid_t pid = ctl(peer).pid.load(std::memory_order_relaxed);
  while (bytes > 0) {
    iovec local{dst, static_cast<size_t>(bytes)};
    iovec remote{reinterpret_cast<void*>(src), static_cast<size_t>(bytes)};
    const ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      throw CommError(detail::concat(
          op.describe(), ": reading rank ", peer, "'s buffer (pid ", pid,
          ", process_vm_readv) failed: ", got < 0 ? std::strerror(errno) : "nothing read"));
    dst += got;
    src += static_cast<uint64_t>(got);
    bytes -= got;
  }
}

void ShmEngine::run_one_copy(const CollectiveOp& op) {
  const size_t es = dtype_size(op.out.dtype());
  char* out = bytes_of(op.out);
  const int64_t n = op.out.numel();
  const char* source = op.type == OpType::broadcast ? out : bytes_of(op.in);
  ctl(rank_).source.store(reinterpret_cast<uint64_t>(source), std::memory_order_relaxed);
  barrier(op);  // publishes every rank's source
  if (op.type == OpType::broadcast) {
    if (rank_ != op.root)
      read_peer(op, op.root, out, ctl(op.root).source.load(std::memory_order_relaxed),
                n * static_cast<int64_t>(es));
  } else {
    for (int j = 0; j < size_; ++j) {
      const Chunk cj = chunk_of(n, size_, j);
      char* dst = out + cj.offset * static_cast<int64_t>(es);
      const auto bytes = static_cast<int64_t>(cj.size * es);
      if (j != rank_)
        read_peer(op, j, dst, ctl(j).source.load(std::memory_order_relaxed), bytes);
      else if (dst != source && bytes > 0)
        std::memcpy(dst, source, static_cast<size_t>(bytes));
    }
  }
  barrier(op);  // every peer has read this rank's source
}

}  // namespace braid::comm
