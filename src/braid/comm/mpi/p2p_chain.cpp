// P2pEngine's small chain over 2 hosts (Note [Small chain]).
#include <algorithm>

#include "braid/comm/chunking.h"
#include "braid/comm/mpi/p2p_engine.h"
#include "braid/comm/process_group.h"
#include "braid/comm/reduce_kernels.h"

namespace braid::comm {

// Note [Small chain]
// An f32 all_reduce over 2 hosts of K ranks each, of more than kOneRoundMaxBytes and at most
// kChainMaxBytes (64 KiB-4 MiB over 2 x 2), as the scattered chain of the hierarchical
// all_reduce (Note [Scattered chain], hier_scattered.cpp) folds it, but place by place: up to
// kInlineMaxBytes on the issuing thread like the other small ops, past it on the comm thread. With
// C_i = chunk_of(n, K, i), place i:
//   host 0, phase 0: the host group reduce_scatters the buffer (its ranks' fold of C_i, in rank
//            order) into scratch; that partial goes to place i of host 1, and the result of C_i
//            comes back from there into the buffer;
//   host 1, phase 0: the partial of C_i comes in while the host group's all_to_all hands place
//            i its host's contributions to C_i; then the fold goes on from the partial through
//            them in rank order (sum for avg, divided by the world size at the end, as
//            reduce_ranks divides), the bits of one host;
//   phase 1: host 1 sends C_i's result back; both hosts all_gather their buffer in place.
// Each rank sends or receives C_i across hosts once each way where the direct exchange sends
// and receives 2 (H - 1) chunks of n / (H K) a phase, half the bytes in all; host 1 waits for
// host 0's fold. The chunks cross in pieces of 32 KiB, under MPI's TCP eager limit (a message
// past it waits for a rendezvous: in one message of 64 KiB the 128 KiB all_reduce took 177-273 us,
// in pieces 151-172). Over 2 network-namespace hosts x 2 ranks (docs/benchmarks.md "Small
// all_reduce across hosts: a chain") 256 KiB went from 0.73-1.00x of raw MPI (two-level) to
// 1.36-1.53x and 128 KiB from 0.42-0.81x (direct) to 0.82-0.93x; 64 KiB (one piece a place)
// from 118-124 us two-level (0.96-1.07x) to 78-82 (1.27-1.65x; "The chain from 64 KiB"), while
// 16-32 KiB stay one round (56-72 us against the chain's 72-81). Past 256 KiB the hierarchical
// all_reduce sent the whole buffer between the hosts' leaders; every place carrying its chunk
// took 2 MiB from 0.52-0.53x of raw MPI to 0.78-0.80x and 4 MiB from 0.64-0.66x to 0.77-0.83x
// (8-16 MiB alike either way, 0.62-0.73x, so they stay hierarchical; "The chain up to 4 MiB").
// Wider types keep the direct exchange (their fold is wider than the data, the partial would
// travel wide), and so do more than 2 hosts (a chain of H hops; not measured).
namespace {
constexpr int64_t kPiece = 32 << 10;
constexpr int64_t kF32 = 4;  // bytes of an element: the chain is f32's alone
}  // namespace

void P2pEngine::post_pieces(bool send, char* data, int64_t bytes, int peer, int tg) {
  for (int64_t at = 0; at < bytes; at += kPiece) {
    const int64_t n = std::min(kPiece, bytes - at);
    if (send)
      post_send(data + at, n, peer, tg);
    else
      post_recv(data + at, n, peer, tg);
  }
}

void P2pEngine::begin_chain(const CollectiveOp& op, int k) {
  const int64_t n = op.out.numel();
  const Chunk mine = chunk_of(n, per_host_, index_);
  const Tensor result = op.out.flat_range(mine.offset, mine.size);
  const int other = peer(1 - host_, index_);
  if (k == 1) {
    if (host_ == 1) post_pieces(true, bytes_of(result), mine.size * kF32, other, tag(op, kData2));
    host_group_->all_gather(op.out, result)->wait();
    return;
  }
  const Tensor partial = buffer(scratch_, mine.size * kF32).reinterpret(DType::f32);
  if (host_ == 0) {
    const ReduceOp combine = combine_of(op.reduce);
    host_group_->reduce_scatter(partial, op.out, combine)->wait();
    post_pieces(true, bytes_of(partial), mine.size * kF32, other, tag(op, kData));
    post_pieces(false, bytes_of(result), mine.size * kF32, other, tag(op, kData2));
    return;
  }
  post_pieces(false, bytes_of(partial), mine.size * kF32, other, tag(op, kData));
  const Tensor got = buffer(host_recv_, per_host_ * mine.size * kF32).reinterpret(DType::f32);
  host_group_->all_to_all(got, op.out)->wait();
}

void P2pEngine::end_chain(const CollectiveOp& op, int k) {
  if (k != 0 || host_ != 1) return;
  const int64_t n = op.out.numel();
  const Chunk mine = chunk_of(n, per_host_, index_);
  std::vector<const void*> srcs(static_cast<size_t>(per_host_) + 1);
  srcs[0] = bytes_of(scratch_);
  for (int j = 0; j < per_host_; ++j)
    srcs[static_cast<size_t>(j) + 1] = bytes_of(host_recv_) + j * mine.size * kF32;
  float* out = reinterpret_cast<float*>(bytes_of(op.out)) + mine.offset;
  const ReduceOp combine = combine_of(op.reduce);
  reduce_ranks(srcs.data(), per_host_ + 1, out, nullptr, mine.size, DType::f32, combine);
  if (op.reduce == ReduceOp::avg) divide_by_ranks(out, mine.size, size_);
}

}  // namespace braid::comm
