// P2pEngine's chain over 2 hosts (Note [Chain across 2 hosts]).
#include <algorithm>

#include "braid/comm/chunking.h"
#include "braid/comm/mpi/p2p_engine.h"
#include "braid/comm/process_group.h"
#include "braid/comm/reduce_kernels.h"

namespace braid::comm {

// Note [Chain across 2 hosts]
// An f32 all_reduce over 2 hosts of K ranks each, of more than kOneRoundMaxBytes (32 KiB), as
// the scattered chain of the hierarchical all_reduce (Note [Scattered chain], hier_scattered.cpp)
// folds it, but place by place: up to kInlineMaxBytes on the issuing thread like the other small
// ops, past it on the comm thread, in segments of at most kChainSegmentBytes one after the
// other. With C_i = chunk_of(segment, K, i), place i:
//   host 0, phase 0: the host group reduce_scatters the segment (its ranks' fold of C_i, in rank
//            order) into scratch; that partial goes to place i of host 1 in pieces, and the
//            result of C_i comes back from there into the buffer;
//   host 1, phase 0: the partial's pieces come in while the host group's all_to_all hands
//            place i its host's contributions to C_i; as each piece lands, the fold goes on from
//            it through them in rank order (sum for avg, divided by the world size at the end,
//            as reduce_ranks divides), the bits of one host, and the piece's result goes back;
//   phase 1: both hosts all_gather the segment in place.
// Each rank sends or receives C_i across hosts once each way where the direct exchange sends
// and receives 2 (H - 1) chunks of n / (H K) a phase, half the bytes in all; with the fold piece
// by piece both directions of the link carry data at once (folding the whole chunk before
// sending it back left the way back idle: over links limited to 4 Gbit/s, 4 MiB took 18.4 ms
// that way and 13.4 piece by piece). The pieces are 32 KiB, under MPI's TCP eager limit (a
// message past it waits for a rendezvous: in one message of 64 KiB the 128 KiB all_reduce took
// 177-273 us, in pieces 151-172; pieces of 128-256 KiB for MiB-sized ops were no faster). Over
// 2 network-namespace hosts x 2 ranks (docs/benchmarks.md "Small all_reduce across hosts: a
// chain", "The chain from 64 KiB", "The chain up to 4 MiB", "The chain at every size") 256 KiB
// went from 0.73-1.00x of raw MPI (two-level) to 1.36-1.53x, 128 KiB from 0.42-0.81x (direct) to
// 0.82-0.93x, 64 KiB from 0.96-1.07x to 1.27-1.65x (16-32 KiB stay one round: 56-72 us against
// the chain's 72-81); past 256 KiB the hierarchical all_reduce sent the whole buffer between the
// hosts' leaders, and the chain took 2 MiB from 0.52-0.53x to 0.78-0.80x and 8-32 MiB from
// 0.56-0.80x to 0.84-1.03x in focused runs (a full sweep in a slower hour: 0.59-0.92x against
// 0.60-0.76x), 64-128 MiB alike or faster. Wider types keep the direct exchange
// (their fold is wider than the data, the partial would travel wide), and so do more than 2 hosts
// (a chain of H hops; not measured).
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

void P2pEngine::run_chain(const CollectiveOp& op) {
  const int64_t n = op.out.numel();
  const int64_t segments =
      std::max<int64_t>(1, (n * kF32 + kChainSegmentBytes - 1) / kChainSegmentBytes);
  for (int64_t s = 0; s < segments; ++s) {
    segment_ = chunk_of(n, static_cast<int>(segments), static_cast<int>(s));
    run_phases(op, 0);
  }
}

Chunk P2pEngine::chain_range() const {
  const Chunk c = chunk_of(segment_.size, per_host_, index_);
  return Chunk{segment_.offset + c.offset, c.size};
}

void P2pEngine::begin_chain(const CollectiveOp& op, int k) {
  const Chunk mine = chain_range();
  const Tensor segment = op.out.flat_range(segment_.offset, segment_.size);
  const Tensor result = op.out.flat_range(mine.offset, mine.size);
  const int other = peer(1 - host_, index_);
  if (k == 1) return host_group_->all_gather(segment, result)->wait();
  const Tensor partial = buffer(scratch_, mine.size * kF32).reinterpret(DType::f32);
  if (host_ == 0) {
    const ReduceOp combine = combine_of(op.reduce);
    host_group_->reduce_scatter(partial, segment, combine)->wait();
    post_pieces(true, bytes_of(partial), mine.size * kF32, other, tag(op, kData));
    post_pieces(false, bytes_of(result), mine.size * kF32, other, tag(op, kData2));
    return;
  }
  post_pieces(false, bytes_of(partial), mine.size * kF32, other, tag(op, kData));
  fold_pieces_ = static_cast<int>(reqs_.size());  // the first requests: nothing was pending
  folded_ = 0;
  const Tensor got = buffer(host_recv_, per_host_ * mine.size * kF32).reinterpret(DType::f32);
  host_group_->all_to_all(got, segment)->wait();
}

void P2pEngine::fold_arrived(const CollectiveOp& op) {
  const Chunk mine = chain_range();
  const ReduceOp combine = combine_of(op.reduce);
  std::vector<const void*> srcs(static_cast<size_t>(per_host_) + 1);
  for (; folded_ < fold_pieces_ && reqs_[static_cast<size_t>(folded_)] == MPI_REQUEST_NULL;
       ++folded_) {
    const int64_t at = folded_ * (kPiece / kF32);
    const int64_t n = std::min(kPiece / kF32, mine.size - at);
    srcs[0] = bytes_of(scratch_) + at * kF32;
    for (int j = 0; j < per_host_; ++j)
      srcs[static_cast<size_t>(j) + 1] = bytes_of(host_recv_) + (j * mine.size + at) * kF32;
    float* out = reinterpret_cast<float*>(bytes_of(op.out)) + mine.offset + at;
    reduce_ranks(srcs.data(), per_host_ + 1, out, nullptr, n, DType::f32, combine);
    if (op.reduce == ReduceOp::avg) divide_by_ranks(out, n, size_);
    post_send(out, n * kF32, peer(0, index_), tag(op, kData2));
  }
}

}  // namespace braid::comm
