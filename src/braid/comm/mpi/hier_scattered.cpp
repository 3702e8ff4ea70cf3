// HierEngine's scattered chain: the hierarchical all_reduce of a mid-sized buffer over hosts
// of equal rank counts (Note [Scattered chain]).
#include <algorithm>

#include "braid/comm/chunking.h"
#include "braid/comm/mpi/hier_engine.h"
#include "braid/comm/mpi/mpi_runtime.h"
#include "braid/comm/process_group.h"
#include "braid/comm/reduce_kernels.h"

namespace braid::comm {

// Note [Scattered chain]
// The chain of Note [Hierarchical all_reduce] sends the whole buffer from leader to leader, so
// below a chunk or two nothing overlaps: a host all_reduce, the buffer across, the fold, the
// next host's all_reduce, the buffer back, a host broadcast, one after another, and each hop
// across hosts is one message stream. Over hosts of k ranks each the scattered chain keeps the
// chain's fold order and splits what crosses hosts k ways:
//   host 0:  reduce_scatter over shared memory (rank j of the host holds chunk j of the fold
//            x_0 (+) ... (+) x_{k-1}); rank j sends its chunk to host 1's leader;
//   host h:  the leader receives the k chunks (the partial P), folds acc = P (+) x_L as the
//            chain does, then the host reduce_scatters, continuing the fold in rank order;
//            rank j sends its chunk on (to host h + 1's leader) unless h is the last host;
//   last:    rank j holds chunk j of the result (divided by the world size for avg) and sends
//            it to rank j of every other host; every host all_gathers it over shared memory.
// Every element sees the flat fold, as in the chain (the bits of one host). The way back is k
// streams between k pairs of ranks instead of one; the way forward k senders to one leader.
// Measured with its host collectives on the caller (Note [Host group on the caller]),
// `MIN=64K bench/multihost.sh 3 16M`, 2 hosts x 2 ranks on 2 cores, two runs alternating with
// the chain's build: all_reduce of 512 KiB 754-1026 us against 1152-1686, 1 MiB 1782-1950
// against 2018-3715, 128-256 KiB alike, 2 MiB 4830-5430 against 3608-5183 (so up to 1 MiB).
// On these shared cores the flat reduce-scatter + all-gather (BRAID_COMM_HIERARCHY=0) was as
// fast from 512 KiB and faster at 1-4 MiB (969-999 us at 1 MiB): every path here is bound by
// four ranks' threads taking turns on two cores, not by the bytes that cross hosts.
void HierEngine::run_scattered(const CollectiveOp& op, Clock::time_point deadline) {
  const int64_t n = op.out.numel();
  float* x = reinterpret_cast<float*>(bytes_of(op.out));
  const int hosts = layout_.hosts(), h = host_index_;
  const int k = ranks_per_host_, j = rank_ - leaders_[static_cast<size_t>(h)];
  const bool leader = j == 0, last = h == hosts - 1;
  const ReduceOp combine = combine_of(op.reduce);
  const Chunk mine = chunk_of(n, k, j);
  auto chunk_tensor = [&](const Chunk& c) { return op.out.flat_range(c.offset, c.size); };

  if (h > 0 && leader) {  // the partial of the hosts before, chunk by chunk from their ranks
    inbox_.resize(std::max(inbox_.size(), static_cast<size_t>(n)));
    std::vector<MPI_Request> recvs(static_cast<size_t>(k), MPI_REQUEST_NULL);
    std::vector<int> from(static_cast<size_t>(k));
    for (int i = 0; i < k; ++i) {
      const Chunk c = chunk_of(n, k, i);
      from[static_cast<size_t>(i)] = leaders_[static_cast<size_t>(h - 1)] + i;
      mpi_check(MPI_Irecv(inbox_.data() + c.offset, static_cast<int>(c.size), MPI_FLOAT,
                          from[static_cast<size_t>(i)], tag_of(op, kForward), comm_,
                          &recvs[static_cast<size_t>(i)]),
                "MPI_Irecv");
    }
    wait(recvs, from, op, deadline, "never sent its partial result");
    const void* srcs[2] = {inbox_.data(), x};
    reduce_ranks(srcs, 2, x, nullptr, n, DType::f32, combine);
  }
  std::vector<MPI_Request> none;
  wait_host(host_now_->reduce_scatter(chunk_tensor(mine), op.out, combine), none);

  std::vector<MPI_Request> sends;
  std::vector<int> to;
  auto send = [&](int peer, Phase phase) {
    sends.emplace_back();
    to.push_back(peer);
    mpi_check(MPI_Isend(x + mine.offset, static_cast<int>(mine.size), MPI_FLOAT, peer,
                        tag_of(op, phase), comm_, &sends.back()),
              "MPI_Isend");
  };
  if (last) {
    if (op.reduce == ReduceOp::avg)
      divide_by_ranks(x + mine.offset, mine.size, static_cast<int>(layout_.host_of.size()));
    for (int g = 0; g < hosts - 1; ++g) send(leaders_[static_cast<size_t>(g)] + j, kResult);
    wait(sends, to, op, deadline, "never received the result");
  } else {
    send(leaders_[static_cast<size_t>(h + 1)], kForward);
    // The partial must be gone before the result lands in the same memory.
    wait(sends, to, op, deadline, "never received");
    std::vector<MPI_Request> recv(1, MPI_REQUEST_NULL);
    const int src = leaders_.back() + j;
    mpi_check(MPI_Irecv(x + mine.offset, static_cast<int>(mine.size), MPI_FLOAT, src,
                        tag_of(op, kResult), comm_, &recv[0]),
              "MPI_Irecv");
    wait(recv, {src}, op, deadline, "never sent the result");
  }
  wait_host(host_now_->all_gather(op.out, chunk_tensor(mine)), none);
}

}  // namespace braid::comm
