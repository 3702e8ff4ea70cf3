// P2pEngine: collectives over MPI point-to-point messages, for groups whose ranks are not all on
// one node. Every wait polls non-blocking requests against the deadline, so nothing blocks
// forever, and a timeout names the ranks whose messages never came.
//
// Algorithms (direct exchange, fine for the tens of ranks of a CPU job): reduce_scatter sends
// chunk j to rank j, which reduces the w contributions in rank order with reduce_ranks (so the
// bits equal the shm transport's); all_reduce is reduce_scatter then all_gather (at most 32 KiB:
// every buffer to every rank, one round); broadcast is a direct send from the root. Small ops
// may run on the issuing thread, and across hosts of equal rank counts take two steps or leave
// their host's part to the host's shared memory: Note [Inline collectives across hosts], Note
// [Two-level small collectives], Note [Host part on shared memory]. Dead processes
// are reported by the launcher: mpirun and srun end the job when a rank dies.
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/comm/chunking.h"
#include "braid/comm/mpi/hier_engine.h"
#include "braid/comm/op.h"
#include "braid/core/tensor.h"

namespace braid::comm {

class P2pEngine {
 public:
  using Clock = std::chrono::steady_clock;

  // comm is private to this engine. debug: exchange fingerprints before every collective.
  // charge(bytes) is told of every growth of the memory kept between collectives before it
  // happens (Note [Group memory], process_group.h); it may throw OutOfMemory.
  // layout names the ranks' hosts in errors. allow_two_level: small ops may take two steps
  // (Note [Two-level small collectives]) with host_group, this rank's host's ranks as a
  // synchronous shared-memory group, taking the steps inside a host; BRAID_COMM_HIERARCHY=0
  // keeps them flat.
  P2pEngine(MPI_Comm comm, int rank, int size, bool debug, std::function<void()> progress,
            std::function<void(int64_t)> charge, HostLayout layout, bool allow_two_level,
            std::shared_ptr<ProcessGroup> host_group);

  void run(const CollectiveOp& op, Clock::time_point deadline);

  // Note [Inline collectives across hosts]: a small all_reduce, reduce_scatter or all_gather (at
  // most kInlineMaxBytes of its larger side) can start on the issuing thread (a hand-off to the
  // comm thread and back cost more than MPI's whole collective: 0.24-0.69x of raw MPI below 64
  // KiB across 2 hosts x 2 ranks). start() posts its first phase's messages and tests them
  // until they are done or `patience` passes with none of them arriving (a peer that is late,
  // not one whose data is flowing), then goes on to the next phase the same way: true when the
  // op is done, false when it gave up; finish() (the comm thread's next call into the engine)
  // then completes it. A two-level op's step inside a host (a collective of the host group) is
  // waited for whole: the host's ranks issue the same op and reach the same step. Whether an
  // op is small depends on the op alone (every rank decides alike), so a hierarchical group runs a
  // small all_reduce flat on both paths.
  static constexpr int64_t kInlineMaxBytes = 256 << 10;
  static constexpr std::chrono::microseconds kInlinePatience{200};
  static bool small(const CollectiveOp& op);
  bool can_start(const CollectiveOp& op) const { return !debug_ && small(op); }
  bool start(const CollectiveOp& op, Clock::time_point deadline, Clock::duration patience);
  void finish(const CollectiveOp& op);

  // Note [Chain across 2 hosts] (p2p_chain.cpp): an f32 all_reduce of more than
  // kOneRoundMaxBytes over 2 hosts folds host 0's ranks on shared memory, carries the partial
  // sums across to host 1 place by place, folds on there piece by piece as they land and
  // carries each piece's result back; up to kInlineMaxBytes on the issuing thread, past it on
  // the comm thread (in place of the hierarchical all_reduce: MpiGroup) in segments of at most
  // kChainSegmentBytes (the buffers it keeps between collectives).
  static constexpr int64_t kChainSegmentBytes = int64_t{32} << 20;
  bool chained(const CollectiveOp& op) const {
    return op.type == OpType::all_reduce && op.out.dtype() == DType::f32 && per_host_ > 1 &&
           size_ == 2 * per_host_ && larger_side(op) > kOneRoundMaxBytes;
  }

 private:
  enum Phase { kFingerprint = 0, kData = 1, kData2 = 2 };  // tags' low bits
  // all_reduce is a reduce-scatter phase then an all-gather phase; reduce_scatter and
  // all_gather are one phase each. begin_phase posts phase k's messages, end_phase does what
  // follows their arrival (the reduction, this rank's own chunk).
  // A small all_reduce of at most kOneRoundMaxBytes sends every rank's whole buffer to every
  // other, each reducing all of it: one round of messages instead of two, the same fold.
  static constexpr int64_t kOneRoundMaxBytes = 32 << 10;
  static bool one_round(const CollectiveOp& op) {
    return op.type == OpType::all_reduce &&
           static_cast<int64_t>(op.out.nbytes()) <= kOneRoundMaxBytes;
  }
  int phases(const CollectiveOp& op) const {
    if (chained(op)) return 2;
    const int flat = op.type == OpType::all_reduce && !one_round(op) ? 2 : 1;
    return two_level(op) ? 2 * flat : flat;
  }

  // Note [Two-level small collectives] (p2p_host_phases.cpp): with the same number of ranks on
  // every host, a small op's messages go once across hosts per rank, between ranks at the same
  // place on their hosts, and then inside each host.
  // Up to kTwoLevelMaxBytes, and for a small op whose direct chunks are past MPI's TCP eager
  // limit (OpenMPI's btl_tcp_eager_limit, 64 KiB by default), where each message of the direct
  // exchange waits for a rendezvous anyway. Between them the packing and the extra step cost
  // more than the messages saved: reduce_scatter and all_gather of 128 KiB took 166-278 us
  // two-level against 117-180 direct with the steps inside a host as MPI messages, and 132-168
  // against 101-108 on shared memory (a host's 64 KiB range crosses in one message past the
  // eager limit, where the direct exchange's 32 KiB chunks go eagerly). At 256 KiB over 2 hosts x
  // 2 ranks (64 KiB chunks) two-level measured 0.85-0.97x of raw MPI on average over three
  // alternating runs against 0.74-0.84x direct (docs/benchmarks.md). Over 2 hosts an f32
  // all_reduce past kOneRoundMaxBytes takes the chain instead (chained(), checked first).
  // Past kInlineMaxBytes, on the comm thread, reduce_scatter up to 512 KiB takes the two steps
  // too (the direct exchange's messages go between the ranks of one host through MPI as well):
  // 318-358 us at 512 KiB against 362-382 direct, as fast or faster direct beyond. Every
  // all_gather takes them: its step across hosts carries each rank's own chunk once, 1.6-1.9x
  // faster than direct at 2-16 MiB, and at 128 KiB 103-160 us against 133-161 (at 4 Gbit/s
  // 103-112 against 201-232) with the host's part on shared memory (docs/benchmarks.md "Two
  // steps past 256 KiB", "all_gather across hosts: each chunk once").
  static constexpr int64_t kTwoLevelMaxBytes = 64 << 10;
  static constexpr int64_t kEagerBytes = 64 << 10;
  static constexpr int64_t kTwoLevelRsMaxBytes = 512 << 10;
  // A two-level all_gather of at most this many bytes sends its host's range across, not each
  // rank's own chunk (Note [Two-level small collectives]).
  static constexpr int64_t kRangeAcrossMaxBytes = 32 << 10;
  bool two_level(const CollectiveOp& op) const {
    if (per_host_ <= 1) return false;
    if (op.type == OpType::all_gather) return true;
    const int64_t bytes = larger_side(op);
    if (!small(op)) return op.type == OpType::reduce_scatter && bytes <= kTwoLevelRsMaxBytes;
    return bytes <= kTwoLevelMaxBytes || bytes / size_ >= kEagerBytes;
  }
  // Bytes of the op's whole buffer: all_gather's output, the others' input.
  static int64_t larger_side(const CollectiveOp& op) {
    return static_cast<int64_t>((op.type == OpType::all_gather ? op.out : op.in).nbytes());
  }
  // Note [Host part on shared memory] (p2p_host_phases.cpp): a small op over hosts of equal rank
  // counts that is not two-level exchanges directly with the ranks of other hosts and, as a
  // collective of the host group, with those of its own.
  bool host_part(const CollectiveOp& op) const {
    return per_host_ > 1 && small(op) && !two_level(op);
  }
  bool on_this_host(int r) const { return r / per_host_ == host_; }
  void run_chain(const CollectiveOp& op);  // segment by segment, each waited for
  // This place's range of the chain's segment (of op.out's elements).
  Chunk chain_range() const;
  void begin_chain(const CollectiveOp& op, int k);
  // bytes at data to or from peer, in messages of at most 32 KiB (under MPI's eager limit).
  void post_pieces(bool send, char* data, int64_t bytes, int peer, int tg);
  // Host 1's fold of the pieces of the partial that have arrived, in order (the results go
  // back in the order host 0 posted their receives), each result sent as it is folded.
  void fold_arrived(const CollectiveOp& op);
  // The host group's share of a direct reduce_scatter of `data`: host_recv_ gets the host's
  // contributions to this rank's chunk (a block per host rank).
  void host_part_rs(const Tensor& data);
  // This rank's chunk `in` into place in `out`, then the host's range of `out` gathered in place
  // by the host group: the host's part of a direct all_reduce's gathering half, and the step
  // inside a host of a small two-level all_gather (every all_gather across hosts is two-level).
  void host_part_ag(const CollectiveOp& op, const char* in, const Tensor& out);
  // Host h's range of `out` gathered in place by the host group, this rank giving the chunk of
  // place index_ on host h.
  void gather_host_range(const Tensor& out, int h);
  void begin_host_phase(const CollectiveOp& op, int k);
  void end_host_phase(const CollectiveOp& op, int k);
  // Two-level steps; `in` and `out` of n elements, `k` the step's phase for its tag.
  void host_rs_begin(const CollectiveOp& op, int step, int k, const char* in, int64_t n);
  void host_rs_end(const CollectiveOp& op, const char* in, char* out, int64_t n);
  void host_ag_begin(const CollectiveOp& op, int step, int k, const char* in, char* out, int64_t n);
  void host_ar1_begin(const CollectiveOp& op, int step, char* data, int64_t n);
  void host_ar1_end(const CollectiveOp& op, char* data, int64_t n);
  int peer(int host, int index) const { return host * per_host_ + index; }
  // Host h's elements of n: its ranks' chunks, one after the other.
  Chunk host_range(int h, int64_t n) const;
  // The first `bytes` of t (u8, kept between calls: scratch_, host_send_, host_recv_), grown
  // (and charged) first; growing does not keep the contents.
  Tensor buffer(Tensor& t, int64_t bytes);
  // Bytes from one packed slot of a two-level reduce_scatter of n elements to the next: H x the
  // largest chunk (host_rs_begin, host_rs_end).
  size_t packed_slot(int64_t n, size_t es) const;
  void begin_phase(const CollectiveOp& op, int k);
  void end_phase(const CollectiveOp& op, int k);
  void run_phases(const CollectiveOp& op, int from);  // phases from..end, each waited for
  // Tests the requests until they are done (true), or (false) until `patience` passes with none
  // of them completing (max: no limit); a timeout or an MPI error throws CommError. Requests
  // below fold_pieces_ are a chain's pieces, folded as they arrive (fold_arrived).
  bool wait_until(const CollectiveOp& op, Clock::duration patience);
  void post_send(const void* data, int64_t bytes, int peer, int tag);
  void post_recv(void* data, int64_t bytes, int peer, int tag);
  void wait_all(const CollectiveOp& op);  // throws CommError on timeout or MPI error
  void check_fingerprints(const CollectiveOp& op);
  std::string host_suffix(int r) const;  // " on host h2", or "" when hosts are unknown
  // Reduce-scatter of n elements over `parts` chunks: size_ (rank j's chunk to rank j) or 1
  // (every rank's whole buffer to every other, each reducing all of it: a small all_reduce in
  // one round of messages instead of two, the same fold in rank order).
  // data: the whole buffer reduced (op.in, or op.out for all_reduce).
  void post_reduce_scatter(const CollectiveOp& op, const Tensor& data, int parts);
  void reduce_received(const CollectiveOp& op, const char* in, char* out, int64_t n, int parts);
  int tag_of_phase(const CollectiveOp& op, int k) const { return tag(op, kData + k % 3); }
  void post_all_gather(const CollectiveOp& op, const char* in, const Tensor& out, int tag);
  void keep_own_chunk(const CollectiveOp& op, const char* in, char* out, int64_t n);
  char* own_chunk(const CollectiveOp& op) const;  // this rank's chunk of op.out
  int tag(const CollectiveOp& op, int phase) const;

  MPI_Comm comm_;
  int rank_;
  int size_;
  bool debug_;
  std::function<void()> progress_;
  std::function<void(int64_t)> charge_;
  HostLayout layout_;
  std::vector<MPI_Request> reqs_;
  std::vector<int> req_peer_;  // peer of each request; negative for sends (-1 - peer)
  Tensor scratch_;             // reduce_scatter contributions (received across hosts, two-level)
  std::shared_ptr<ProcessGroup> host_group_;  // the steps inside a host, on shared memory
  Tensor host_send_, host_recv_;              // their buffers
  std::vector<CollectiveOp> abandoned_;       // ops whose requests were left in flight by a failure
  Clock::time_point deadline_;
  Clock::time_point started_;
  int phase_ = 0;        // the phase whose messages are posted (start() to finish())
  int fold_pieces_ = 0;  // host 1 of a chain: its first requests receive the partial's pieces
  int folded_ = 0;       // how many of them are folded
  Chunk segment_;        // the chain's segment of op.out in flight
  int per_host_ = 0;     // ranks on each host, when every host has as many (consecutive); else 0
  int host_ = 0, index_ = 0;  // this rank's host and its place there
};

}  // namespace braid::comm
