// P2pEngine's two-level small collectives (Note [Two-level small collectives]).
#include <cstring>

#include "braid/comm/chunking.h"
#include "braid/comm/mpi/p2p_engine.h"
#include "braid/comm/process_group.h"
#include "braid/comm/reduce_kernels.h"

namespace braid::comm {

// Note [Two-level small collectives]: over H hosts of K ranks each (rank h K + i is place i on
// host h), the direct exchange sends each rank's data to all H K - 1 others, (H - 1) K messages
// across hosts per rank, where MPI's recursive halving sends one a step. On hosts whose cores
// the ranks share, a small op's cost is its messages (sends, receives, wake-ups), and those
// across hosts most. So an op of at most kTwoLevelMaxBytes, or a small one whose direct chunks
// are past MPI's eager limit, or (on the comm thread) a reduce_scatter of at most 512 KiB, and
// every all_gather (P2pEngine::two_level), goes in steps whose messages cross hosts
// only between ranks at the same place i:
//   reduce_scatter: (1) across: to (h', i) the part of its input that host h' owns (its K
//                   chunks, one range); (2) inside: to each (h, j) chunk (h, j) of its own input
//                   and of the H - 1 parts received, packed in host order. Every contribution
//                   to a rank's chunk is then at the rank, which folds them in rank order with
//                   reduce_ranks: the bits of the direct exchange and of one host.
//   all_gather:     (1) across: its own chunk to (h', i); (2) inside: each host's range
//                   gathered in place, this rank holding that host's chunk at place i. A host
//                   receives each other host's chunks once, one at each place (sending the
//                   host's range from every place carried it K times: at 4 Gbit/s a 1 MiB
//                   all_gather took 2.1 ms that way, 0.83 now). Up to kRangeAcrossMaxBytes,
//                   where one host step counts more than the bytes, (1) inside: the host's
//                   range gathered; (2) across: that range to (h', i) (8 KiB: 40-42 us against
//                   46-47 with H host steps).
//   all_reduce:     of at most kOneRoundMaxBytes: (1) across: the whole buffer to (h', i);
//                   (2) inside: its own and the H - 1 received, packed, to each (h, j); then
//                   every rank folds all H K in rank order. Larger: reduce_scatter then
//                   all_gather as above, four steps.
// Each rank sends H - 1 messages across hosts a step instead of (H - 1) K. The steps inside a
// host are collectives of the host's synchronous shared-memory group (the one the hierarchical
// all_reduce uses, Note [Host group on the caller]): reduce_scatter's an all_to_all of the packed
// slots, all_gather's one in-place all_gather per host's range, all_reduce's an all_gather of the
// packed contributions. As MPI messages (MPI's shared memory) each such step took as long as the
// one across hosts (reduce_scatter of 8 KiB: 25 us across, 28 inside; 32 KiB: 37-41 and 39-43),
// every test of a request polling the TCP sockets too. Measured across 2 network-namespace hosts
// x 2 ranks on 2 cores: docs/benchmarks.md "Small collectives across hosts: inline and two-level"
// and "... the steps inside a host on shared memory".

Chunk P2pEngine::host_range(int h, int64_t n) const {
  const Chunk a = chunk_of(n, size_, peer(h, 0)), b = chunk_of(n, size_, peer(h, per_host_ - 1));
  return Chunk{a.offset, b.offset + b.size - a.offset};
}

Tensor P2pEngine::buffer(Tensor& t, int64_t bytes) {
  if (!t.defined() || t.numel() < bytes) {
    if (charge_) charge_(bytes - (t.defined() ? t.numel() : 0));
    t = Tensor::empty(Shape{bytes}, DType::u8, MemCategory::communication, nullptr, Device::cpu());
  }
  return t.flat_range(0, bytes);
}

size_t P2pEngine::packed_slot(int64_t n, size_t es) const {
  return static_cast<size_t>(size_ / per_host_) * chunk_of(n, size_, 0).size * es;
}

// Buffers of a reduce_scatter: scratch_ holds the parts received across hosts, H x R (R: this
// host's range in bytes, slot h' for host h'), taken at the same size by both steps;
// host_send_ the K slots packed for each (h, j), H x C_j, and host_recv_ what comes from each
// (h, j), H x C; every slot H x C_max bytes apart (an all_to_all's equal chunks).
void P2pEngine::host_rs_begin(const CollectiveOp& op, int step, int k, const char* in, int64_t n) {
  const size_t es = dtype_size(op.in.dtype());
  const int hosts = size_ / per_host_;
  const Chunk here = host_range(host_, n);
  char* from_hosts = bytes_of(buffer(scratch_, static_cast<int64_t>(hosts * here.size * es)));
  if (step == 0) {
    for (int h = 0; h < hosts; ++h) {
      if (h == host_) continue;
      const Chunk theirs = host_range(h, n);
      if (here.size)
        post_recv(from_hosts + h * here.size * es, here.size * es, peer(h, index_),
                  tag_of_phase(op, k));
      if (theirs.size)
        post_send(in + theirs.offset * es, theirs.size * es, peer(h, index_), tag_of_phase(op, k));
    }
    return;
  }
  const size_t slot = packed_slot(n, es);
  const Tensor packed = buffer(host_send_, static_cast<int64_t>(per_host_ * slot));
  for (int j = 0; j < per_host_; ++j) {
    if (j == index_) continue;
    const Chunk cj = chunk_of(n, size_, peer(host_, j));
    char* pack = bytes_of(packed) + j * slot;
    for (int h = 0; h < hosts; ++h) {
      const char* src = h == host_ ? in + cj.offset * es
                                   : from_hosts + (h * here.size + cj.offset - here.offset) * es;
      std::memcpy(pack + h * cj.size * es, src, cj.size * es);
    }
  }
  host_group_->all_to_all(buffer(host_recv_, packed.numel()), packed)->wait();
}

void P2pEngine::host_rs_end(const CollectiveOp& op, const char* in, char* out, int64_t n) {
  const DType dt = op.in.dtype();
  const size_t es = dtype_size(dt);
  const Chunk mine = chunk_of(n, size_, rank_);
  const Chunk range = host_range(host_, n);
  const int64_t here = range.size;
  const char* from_hosts = bytes_of(scratch_);
  const char* from_inside = bytes_of(host_recv_);
  const size_t slot = packed_slot(n, es);
  std::vector<const void*> srcs(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    const int h = r / per_host_, j = r % per_host_;
    if (j != index_)
      srcs[r] = from_inside + j * slot + h * mine.size * es;
    else if (h == host_)
      srcs[r] = in + mine.offset * es;
    else
      srcs[r] = from_hosts + (h * here + mine.offset - range.offset) * es;
  }
  reduce_ranks(srcs.data(), size_, out, nullptr, mine.size, dt, op.reduce);
}

void P2pEngine::host_ag_begin(const CollectiveOp& op, int step, int k, const char* in, char* out,
                              int64_t n) {
  const size_t es = dtype_size(op.out.dtype());
  const int hosts = size_ / per_host_;
  // With place index_ of every other host h: `mine` of out goes there, theirs(h) comes back.
  auto across = [&](const Chunk& mine, auto theirs) {
    for (int h = 0; h < hosts; ++h) {
      if (h == host_) continue;
      const Chunk from = theirs(h);
      if (from.size)
        post_recv(out + from.offset * es, from.size * es, peer(h, index_), tag_of_phase(op, k));
      if (mine.size)
        post_send(out + mine.offset * es, mine.size * es, peer(h, index_), tag_of_phase(op, k));
    }
  };
  if (static_cast<int64_t>(n * es) <= kRangeAcrossMaxBytes) {  // inside, then the host's range
    if (step == 0) return host_part_ag(op, in, op.out);
    return across(host_range(host_, n), [&](int h) { return host_range(h, n); });
  }
  if (step == 0) {
    keep_own_chunk(op, in, out, n);
    return across(chunk_of(n, size_, rank_),
                  [&](int h) { return chunk_of(n, size_, peer(h, index_)); });
  }
  for (int h = 0; h < hosts; ++h)
    gather_host_range(op.out, h);  // this place's chunks came in step 0
}

// Buffers of a one-round all_reduce: host_send_ holds H slots of n (slot h: host h's
// contribution at this place, this rank's own copied into slot host_), host_recv_ the K slots of
// H x n gathered inside the host; both taken at step 0 (its receives land in host_send_).
void P2pEngine::host_ar1_begin(const CollectiveOp& op, int step, char* data, int64_t n) {
  const size_t bytes = static_cast<size_t>(n) * dtype_size(op.out.dtype());
  const int hosts = size_ / per_host_;
  const Tensor placed = buffer(host_send_, static_cast<int64_t>(hosts * bytes));
  const Tensor gathered = buffer(host_recv_, per_host_ * placed.numel());
  char* at_place = bytes_of(placed);
  if (step == 0) {
    for (int h = 0; h < hosts; ++h) {
      if (h == host_) continue;
      post_recv(at_place + h * bytes, bytes, peer(h, index_), tag_of_phase(op, 0));
      post_send(data, bytes, peer(h, index_), tag_of_phase(op, 0));
    }
    return;
  }
  std::memcpy(at_place + host_ * bytes, data, bytes);
  host_group_->all_gather(gathered, placed)->wait();
}

void P2pEngine::host_ar1_end(const CollectiveOp& op, char* data, int64_t n) {
  const DType dt = op.out.dtype();
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dt);
  const int hosts = size_ / per_host_;
  const char* at_place = bytes_of(host_send_);
  const char* from_inside = bytes_of(host_recv_);
  std::vector<const void*> srcs(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    const int h = r / per_host_, j = r % per_host_;
    srcs[r] = j == index_ ? at_place + h * bytes : from_inside + (j * hosts + h) * bytes;
  }
  reduce_ranks(srcs.data(), size_, data, nullptr, n, dt, op.reduce);
}

// Note [Host part on shared memory]: a small op that two steps do not suit (over 2 hosts x 2
// ranks, one of 128 KiB: a host's range of 64 KiB would cross in one message past MPI's eager
// limit, where the direct exchange's 32 KiB chunks go eagerly) keeps the direct exchange with
// the ranks of other hosts, and leaves its own host's ranks to the host group, as the two-level
// steps do: the messages across hosts are posted first, then the host group's collective runs
// (while they travel), then their wait. reduce_scatter: an all_to_all of the host's range of
// the input, which hands each host rank the contributions to its chunk from its host; the
// gathering half of a direct all_reduce: this rank's chunk into place, then the host's range
// gathered in place (all_gather itself always takes the two steps). Every rank's contribution
// still reaches the rank that folds it, in rank order: the same bits.
void P2pEngine::host_part_rs(const Tensor& data) {
  const Chunk range = host_range(host_, data.numel());
  const int64_t mine = chunk_of(data.numel(), size_, rank_).size;
  const int64_t es = static_cast<int64_t>(dtype_size(data.dtype()));
  const Tensor got = buffer(host_recv_, per_host_ * mine * es).reinterpret(data.dtype());
  host_group_->all_to_all(got, data.flat_range(range.offset, range.size))->wait();
}

void P2pEngine::host_part_ag(const CollectiveOp& op, const char* in, const Tensor& out) {
  keep_own_chunk(op, in, bytes_of(out), out.numel());
  gather_host_range(out, host_);
}

void P2pEngine::gather_host_range(const Tensor& out, int h) {
  const int64_t n = out.numel();
  const Chunk range = host_range(h, n);
  const Chunk c = chunk_of(n, size_, peer(h, index_));
  // In place on host h's range of out: its chunk j is rank (h, j)'s (the global chunks' sizes
  // restricted to a host's consecutive ranks are chunk_of's over its range).
  const Tensor whole = out.flat_range(range.offset, range.size);
  host_group_->all_gather(whole, whole.flat_range(c.offset - range.offset, c.size))->wait();
}

// Phases of a two-level op: reduce_scatter and all_gather 0-1; a one-round all_reduce 0-1; a
// larger all_reduce 0-1 reduce-scatter into this rank's chunk of out, 2-3 all-gather from it.
void P2pEngine::begin_host_phase(const CollectiveOp& op, int k) {
  if (op.type == OpType::reduce_scatter)
    return host_rs_begin(op, k, k, bytes_of(op.in), op.in.numel());
  if (op.type == OpType::all_gather)
    return host_ag_begin(op, k, k, bytes_of(op.in), bytes_of(op.out), op.out.numel());
  char* data = bytes_of(op.out);
  const int64_t n = op.out.numel();
  if (one_round(op)) return host_ar1_begin(op, k, data, n);
  if (k < 2) return host_rs_begin(op, k, k, data, n);
  host_ag_begin(op, k - 2, k, own_chunk(op), data, n);
}

void P2pEngine::end_host_phase(const CollectiveOp& op, int k) {
  if (op.type == OpType::reduce_scatter) {
    if (k == 1) host_rs_end(op, bytes_of(op.in), bytes_of(op.out), op.in.numel());
    return;
  }
  if (op.type == OpType::all_gather) return;
  char* data = bytes_of(op.out);
  const int64_t n = op.out.numel();
  if (one_round(op)) {
    if (k == 1) host_ar1_end(op, data, n);
    return;
  }
  if (k == 1) host_rs_end(op, data, own_chunk(op), n);
}

}  // namespace braid::comm
