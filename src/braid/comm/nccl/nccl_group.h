// NcclGroup: the NCCL backend, for tensors on CUDA devices. Built when BRAID_CUDA is ON and NCCL
// is found (then BRAID_NCCL is defined for whatever links braid_comm). One group drives one
// device: its home is Device{cuda, device_index}. Host tensors are staged through device
// buffers (Note [Device staging]: the pipeline's headers and the like); a tensor on another
// device fails the op (and, as any failed collective, the group) with a CommError naming the op
// and the tensor's device.
//
//   auto world = braid::comm::init_world();                      // MPI, or a LocalGroup
//   auto gpu = braid::comm::make_nccl_group(*world, local_rank, {.name = "world/nccl"});
//
// The bootstrap group carries the NCCL unique id (rank 0 makes it, a broadcast of 128 bytes on
// the CPU); every rank of the bootstrap must call make_nccl_group at the same point of its
// bootstrap's collective order. The new group has the bootstrap's ranks and size.
//
// Note [NCCL streams]: NCCL runs on streams of the group's own (cudaStreamNonBlocking), never
// on braid's compute stream, so communication overlaps compute (contract point 2). The order
// between them is kept with events:
//  - before: at the start of each operation, on the comm thread, an event is recorded on the
//    compute stream and the NCCL stream waits for it. The base class gives the operation to the
//    comm thread after the issuing thread returned, so the compute stream then holds at least
//    the work that produced the operation's tensors (braid enqueues producers before it issues
//    the collective). It may also hold work queued after the issue: by contract point 3 that
//    work does not touch the operation's tensors, so this costs overlap, never correctness.
//  - after: a done-event is recorded on the NCCL stream after the NCCL calls; the comm thread
//    polls it (cudaEventQuery, and ncclCommGetAsyncError) until it completes or the deadline
//    passes, so Work::wait() returning means the result is in device memory. The compute stream
//    is also made to wait for the done-event, so anything queued on it later sees the result.
//  The compute stream is found through `compute_stream`, by default the registered CUDA
//  backend's queue (core's DeviceBackend::queue: comm links core only, not kernels, docs/
//  design.md "Layers"). Without one, each operation first synchronises the device's compute
//  queue through DeviceBackend::synchronize (correct, but the issuing side's queued work is
//  waited out on the host) and the after-wait is left to the host wait.
//
// Communicators run non-blocking (ncclConfig_t::blocking = 0), so that initialisation, lazy
// connection set-up, enqueueing and split all honour the group's timeout: on timeout the
// communicators are aborted (ncclCommAbort) and the op fails with a CommError; the group is
// then broken (contract point 5). NCCL does not say which peers never arrived, so the message
// cannot name them; a peer that dies is seen as the timeout, or as NCCL's own async error.
//
// Note [NCCL reductions]: a deviation from contract point 6. NCCL reduces along rings and
// trees whose order depends on the algorithm, protocol, channel count and topology, not in rank
// order 0..n-1, and avg on floating types pre-multiplies by 1/n. So on nccl, all_reduce is NOT
// promised to equal reduce_scatter followed by all_gather bit for bit, nor to equal the CPU
// backends' result. Results are deterministic run to run for a fixed configuration (same
// ranks, devices, NCCL version, and NCCL_ALGO / NCCL_PROTO pinned); this backend sets nothing
// itself. Integer sums wrap and integer avg truncates toward zero, as on the other backends.
//
// Note [NCCL uneven chunks]: NCCL's all_gather and reduce_scatter need equal chunks. When
// n % w == 0 they are used directly (in place included); otherwise all_gather is one
// ncclBroadcast per rank chunk and reduce_scatter one ncclReduce per rank chunk, all inside one
// ncclGroupStart/End, with no staging copy. all_to_all is ncclSend/ncclRecv pairs in a group.
//
// Note [NCCL send/recv]: an NCCL send is a rendezvous on the GPU: it completes only when the
// peer's matching recv runs. To keep contract point 4 as far as NCCL allows, send/recv never
// share a stream or a communicator with the collectives (a send waiting for its recv never
// holds a later collective), and run on two lanes of their own: messages from a lower to a
// higher rank on one, from higher to lower on the other, so two ranks that both send and then
// receive do not wait on each other. Within a lane, p2p ops still complete in issue order, so
// a rank's sends to different peers wait on each other's receivers. Tags are not matched by
// NCCL: messages between two ranks pair up in issue order whatever their tags.
//
// Memory (Note [Group memory]): a small device scratch (barrier, split's exchange) is charged
// to category communication; NCCL's own buffers are not seen by braid and are not charged.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "braid/comm/process_group.h"

namespace braid::comm {

// Returns the cudaStream_t (as void*) braid queues compute on for a device index.
using ComputeStreamFn = std::function<void*(int device_index)>;

// Collective over `bootstrap` (Note above). Throws CommError when NCCL or CUDA fails, or when
// initialisation outlives options.timeout.
std::shared_ptr<ProcessGroup> make_nccl_group(ProcessGroup& bootstrap, int device_index,
                                              ProcessGroupOptions options,
                                              ComputeStreamFn compute_stream = {});

class NcclGroup : public ProcessGroup {
 public:
  struct Impl;  // the NCCL and CUDA handles (nccl_group.cpp)

  NcclGroup(std::unique_ptr<Impl> impl, int rank, int size, ProcessGroupOptions options);
  ~NcclGroup() override;

  std::string backend() const override { return "nccl"; }
  Device home_device() const override;  // cuda:device_index (Note [Device staging])
  int device_index() const;

 protected:
  void run_collective(const CollectiveOp& op, Clock::time_point deadline) override;
  void start_p2p(const CollectiveOp& op, std::shared_ptr<Work> work,
                 Clock::time_point deadline) override;
  bool poll_p2p() override;
  void fail_p2p(const std::string& why) override;
  std::shared_ptr<ProcessGroup> make_subgroup(int color, const std::vector<int>& members,
                                              uint64_t seq, ProcessGroupOptions options) override;
  void on_fatal(const std::string& message) override;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace braid::comm
