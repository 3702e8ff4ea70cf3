// NcclGroup's send and recv (Note [NCCL send/recv], nccl_group.h): each on its lane's
// communicator and stream, polled until done or the deadline.
#include "braid/comm/nccl/nccl_impl.h"

namespace braid::comm {

using namespace nccl_impl;

void NcclGroup::start_p2p(const CollectiveOp& op, std::shared_ptr<Work> work,
                          Clock::time_point deadline) {
  Impl& m = *impl_;
  if (m.aborted) throw CommError(op.describe() + ": the NCCL communicator was aborted earlier");
  m.set_device();
  m.check_device(op, op.in);
  if (op.in.numel() == 0) return work->mark_done();  // a non-empty peer times out
  Impl::PendingP2p p;
  p.op = op;
  p.work = std::move(work);
  p.deadline = deadline;
  // Note [NCCL send/recv]: lane 0 carries messages from a lower to a higher rank.
  const int from = op.type == OpType::send ? rank() : op.root;
  const int to = op.type == OpType::send ? op.root : rank();
  p.lane = from < to ? 0 : 1;
  if (!m.lanes[p.lane].comm) throw CommError(op.describe() + ": no NCCL send/recv communicator");
  p.ready = m.compute_ready(op.describe());
  m.pending.push_back(std::move(p));
  poll_p2p();
}

bool NcclGroup::poll_p2p() {
  Impl& m = *impl_;
  if (m.pending.empty()) return false;
  std::string error;
  try {
    m.set_device();
    const auto now = Clock::now();
    for (int l = 0; l < 2; ++l) {
      Impl::Lane& lane = m.lanes[l];
      // At most one op of a lane is being enqueued (a non-blocking communicator takes no call
      // until its last one finished); the ones after it wait their turn.
      for (auto& p : m.pending) {
        if (p.lane != l) continue;
        const std::string what = p.op.describe();
        if (!p.issued) {
          if (p.ready.e)
            cuda_check(cudaStreamWaitEvent(lane.stream, p.ready.e, 0),
                       what + ": cudaStreamWaitEvent");
          const auto bytes = p.op.in.nbytes();
          m.check(ncclGroupStart(), lane.comm, "ncclGroupStart", what);
          if (p.op.type == OpType::send) {
            m.check(ncclSend(cptr(p.op.in), bytes, ncclUint8, p.op.root, lane.comm, lane.stream),
                    lane.comm, "ncclSend", what);
          } else {
            m.check(ncclRecv(mptr(p.op.out), bytes, ncclUint8, p.op.root, lane.comm, lane.stream),
                    lane.comm, "ncclRecv", what);
          }
          m.check(ncclGroupEnd(), lane.comm, "ncclGroupEnd", what);
          p.issued = true;
        }
        if (!p.enqueued) {
          ncclResult_t state = ncclSuccess;
          m.check(ncclCommGetAsyncError(lane.comm, &state), lane.comm, "ncclCommGetAsyncError",
                  what);
          if (state == ncclInProgress) {
            if (now > p.deadline) m.fail(m.timed_out(what));
            break;
          }
          if (state != ncclSuccess)
            m.fail(detail::concat(what, ": NCCL failed: ", m.nccl_error(state, lane.comm)));
          p.done = Event(what.c_str());
          cuda_check(cudaEventRecord(p.done.e, lane.stream), what + ": cudaEventRecord");
          m.compute_after(p.done, what);
          p.enqueued = true;
        }
      }
    }
    // Complete what is done; a lane's ops finish in order, lanes independently.
    for (auto it = m.pending.begin(); it != m.pending.end();) {
      if (it->enqueued) {
        cudaError_t q = cudaEventQuery(it->done.e);
        if (q == cudaSuccess) {
          it->op.in = Tensor();
          it->op.out = Tensor();
          it->work->mark_done();
          it = m.pending.erase(it);
          continue;
        }
        if (q != cudaErrorNotReady) cuda_check(q, it->op.describe());
      }
      if (now > it->deadline) {
        const std::string what = it->op.describe();
        m.fail(detail::concat(m.timed_out(what), ": rank ", it->op.root,
                              it->op.type == OpType::send ? " never received" : " never sent"));
      }
      ++it;
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!error.empty()) {
    m.abort_all();
    for (auto& p : m.pending) p.work->mark_failed(std::string(prefix() + error));
    m.pending.clear();
    mark_broken(error);
  }
  return !m.pending.empty();
}

void NcclGroup::fail_p2p(const std::string& why) {
  Impl& m = *impl_;
  if (m.pending.empty()) return;
  // Sends/recvs left on the device would hold the communicator: abort it.
  m.abort_all();
  for (auto& p : m.pending)
    p.work->mark_failed(std::string(prefix() + p.op.describe() + " failed: " + why));
  m.pending.clear();
}

}  // namespace braid::comm
