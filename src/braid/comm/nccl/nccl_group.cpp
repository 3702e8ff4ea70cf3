#include "braid/comm/nccl/nccl_group.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <thread>

#include "braid/comm/chunking.h"
#include "braid/comm/device_group.h"
#include "braid/core/device_backend.h"
#include "braid/core/error.h"

namespace braid::comm {

namespace {

using Clock = ProcessGroup::Clock;

// Scratch for barrier (1 byte) and split's (color, key) exchange (16 bytes per rank).
constexpr size_t kMinScratch = 256;

void cuda_check(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) [[likely]]
    return;
  throw CommError(
      detail::concat(what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::u8:
      return ncclUint8;
  }
  throw CommError(detail::concat("nccl: no NCCL type for dtype ", dtype_name(t)));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  throw CommError("nccl: unknown reduce op");
}

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // Note [NCCL streams]: every wait honours the deadline
  return config;
}

const void* cptr(const Tensor& t) {
  return t.device_data();
}
void* mptr(const Tensor& t) {
  return const_cast<void*>(t.device_data());
}
char* at(const Tensor& t, int64_t elements) {
  return static_cast<char*>(mptr(t)) + elements * static_cast<int64_t>(dtype_size(t.dtype()));
}

// A CUDA event without timing, destroyed with its owner (work on the device may still be
// pending: CUDA releases the event once it completes).
struct Event {
  cudaEvent_t e = nullptr;
  Event() = default;
  explicit Event(const char* what) {
    cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), what);
  }
  ~Event() {
    if (e) cudaEventDestroy(e);
  }
  Event(Event&& o) noexcept : e(o.e) { o.e = nullptr; }
  Event& operator=(Event&& o) noexcept {
    std::swap(e, o.e);
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

// Polls `done` with short spins first, then sleeps of 50 us (a collective of a training step
// takes milliseconds; the first microseconds matter for small ones).
template <typename Done>
void poll_until(Done&& done) {
  for (int i = 0;; ++i) {
    if (done()) return;
    if (i < 200) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace

struct NcclGroup::Impl {
  struct Lane {  // Note [NCCL send/recv]: 0 carries lower -> higher rank, 1 higher -> lower
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
  };
  struct PendingP2p {
    CollectiveOp op;
    std::shared_ptr<Work> work;
    Clock::time_point deadline;
    int lane = 0;
    Event ready;  // on the compute stream when the op started (null: none to wait for)
    Event done;   // on the lane's stream after the send/recv, once enqueued
    bool issued = false;
    bool enqueued = false;
  };

  int device = 0;
  ComputeStreamFn compute_stream;
  std::string name;  // for errors outside an op: "group 'x' rank r: "
  int64_t timeout_ms = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  Lane lanes[2];
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  bool aborted = false;
  std::deque<PendingP2p> pending;  // comm thread

  ~Impl() { release(); }

  void set_device() const {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != device)
      cuda_check(cudaSetDevice(device), detail::concat("nccl: cudaSetDevice(", device, ")"));
  }

  // Every communicator aborted (their kernels stop); the group is unusable afterwards.
  void abort_all() {
    for (ncclComm_t* c : {&comm, &lanes[0].comm, &lanes[1].comm}) {
      if (*c) ncclCommAbort(*c);
      *c = nullptr;
    }
    aborted = true;
  }

  [[noreturn]] void fail(const std::string& message) {
    abort_all();
    throw CommError(message);
  }

  std::string nccl_error(ncclResult_t r, ncclComm_t c) const {
    const char* last = ncclGetLastError(c);
    return detail::concat(ncclGetErrorString(r), last && *last ? std::string(": ") + last : "");
  }

  void check(ncclResult_t r, ncclComm_t c, const char* call, const std::string& what) {
    if (r == ncclSuccess || r == ncclInProgress) [[likely]]
      return;
    fail(detail::concat(what, ": ", call, " failed: ", nccl_error(r, c)));
  }

  // A non-blocking communicator's last call has finished (ncclSuccess), within the deadline.
  void wait_comm(ncclComm_t c, Clock::time_point deadline, const std::string& what) {
    poll_until([&] {
      ncclResult_t state = ncclSuccess;
      check(ncclCommGetAsyncError(c, &state), c, "ncclCommGetAsyncError", what);
      if (state == ncclSuccess) return true;
      if (state != ncclInProgress)
        fail(detail::concat(what, ": NCCL failed: ", nccl_error(state, c)));
      if (Clock::now() > deadline) fail(timed_out(what));
      return false;
    });
  }

  // Note [Non-blocking split]: with a non-blocking config, ncclCommSplit may store the new
  // communicator into *slot only when its background work is done (seen on NCCL 2.28: the
  // handle read right after the call was null, and a collective on it failed with "comm
  // argument is NULL"). So the split writes straight into its final place, and this waits for
  // the parent, then for the handle to appear, then for the child itself.
  void await_split(ncclComm_t parent, ncclComm_t* slot, Clock::time_point deadline,
                   const std::string& what) {
    wait_comm(parent, deadline, what);
    poll_until([&] {
      if (std::atomic_ref<ncclComm_t>(*slot).load(std::memory_order_acquire)) return true;
      if (Clock::now() > deadline) fail(timed_out(what));
      return false;
    });
    wait_comm(*slot, deadline, what);
  }

  // The event has completed (the work before it is in device memory), within the deadline.
  void wait_event(cudaEvent_t e, ncclComm_t c, Clock::time_point deadline,
                  const std::string& what) {
    poll_until([&] {
      cudaError_t q = cudaEventQuery(e);
      if (q == cudaSuccess) return true;
      if (q != cudaErrorNotReady) {
        try {
          cuda_check(q, what);
        } catch (const CommError& err) {
          fail(err.what());
        }
      }
      ncclResult_t state = ncclSuccess;
      check(ncclCommGetAsyncError(c, &state), c, "ncclCommGetAsyncError", what);
      if (state != ncclSuccess && state != ncclInProgress)
        fail(detail::concat(what, ": NCCL failed: ", nccl_error(state, c)));
      if (Clock::now() > deadline) fail(timed_out(what));
      return false;
    });
  }

  std::string timed_out(const std::string& what) const {
    return detail::concat(what, " timed out after ", timeout_ms,
                          " ms on NCCL (the communicator was aborted; NCCL does not say which "
                          "ranks never arrived)");
  }

  // Note [NCCL streams]: an event after the compute stream's work so far, or (no compute stream
  // known) that work waited out here. Returns a null event in the latter case.
  Event compute_ready(const std::string& what) {
    if (compute_stream) {
      auto s = static_cast<cudaStream_t>(compute_stream(device));
      Event ready(what.c_str());
      cuda_check(cudaEventRecord(ready.e, s), what + ": cudaEventRecord on the compute stream");
      return ready;
    }
    if (DeviceBackend* backend = device_backend(DeviceType::cuda))
      backend->synchronize(Device{DeviceType::cuda, device});
    return {};
  }

  // Later work on the compute stream waits for `done`.
  void compute_after(const Event& done, const std::string& what) {
    if (!compute_stream) return;
    auto s = static_cast<cudaStream_t>(compute_stream(device));
    cuda_check(cudaStreamWaitEvent(s, done.e, 0), what + ": cudaStreamWaitEvent (compute)");
  }

  // The communicator's stream, scratch and (size > 1) send/recv lanes. Collective over comm.
  void setup(int rank, int size, Clock::time_point deadline) {
    set_device();
    const std::string what = name + "setting up NCCL";
    cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), what);
    if (size > 1) {
      for (Lane& lane : lanes) {
        ncclConfig_t config = nonblocking_config();
        check(ncclCommSplit(comm, 0, rank, &lane.comm, &config), comm, "ncclCommSplit", what);
        await_split(comm, &lane.comm, deadline, what);  // Note [Non-blocking split]
        cuda_check(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking), what);
      }
    }
    scratch_bytes = std::max(kMinScratch, 16 * static_cast<size_t>(size));
    cuda_check(cudaMalloc(&scratch, scratch_bytes), what + ": cudaMalloc of the scratch");
  }

  // Idempotent; never throws (destructor path). Collectives are all finished here (stop()).
  void release() noexcept {
    if (cudaSetDevice(device) != cudaSuccess) return;
    if (!aborted) {
      const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
      for (ncclComm_t* c : {&lanes[0].comm, &lanes[1].comm, &comm}) {
        if (!*c) continue;
        ncclResult_t state = ncclCommFinalize(*c);
        while (state == ncclInProgress || state == ncclSuccess) {
          if (ncclCommGetAsyncError(*c, &state) != ncclSuccess) break;
          if (state != ncclInProgress) break;
          if (Clock::now() > deadline) break;
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
        if (state == ncclSuccess) {
          ncclCommDestroy(*c);
        } else {
          ncclCommAbort(*c);
        }
        *c = nullptr;
      }
    }
    for (cudaStream_t* s : {&stream, &lanes[0].stream, &lanes[1].stream}) {
      if (*s) cudaStreamDestroy(*s);
      *s = nullptr;
    }
    if (scratch) cudaFree(scratch);
    scratch = nullptr;
  }

  void check_device(const CollectiveOp& op, const Tensor& t) const {
    if (!t.defined()) return;
    const Device d = t.device();
    if (d.type == DeviceType::cuda && d.index == device) return;
    throw CommError(detail::concat(op.describe(), ": a tensor is on ", d.str(),
                                   "; the nccl group works on cuda:", device,
                                   " (move it with Tensor::to)"));
  }
};

std::shared_ptr<ProcessGroup> make_nccl_group(ProcessGroup& bootstrap, int device_index,
                                              ProcessGroupOptions options,
                                              ComputeStreamFn compute_stream) {
  const int rank = bootstrap.rank();
  const int size = bootstrap.size();
  const auto deadline = Clock::now() + options.timeout;
  auto impl = std::make_unique<NcclGroup::Impl>();
  impl->device = device_index;
  impl->compute_stream = std::move(compute_stream);
  if (!impl->compute_stream) {
    // The CUDA backend's queue, where one is registered (Note [NCCL streams]).
    if (DeviceBackend* backend = device_backend(DeviceType::cuda);
        backend && backend->queue(Device{DeviceType::cuda, device_index}))
      impl->compute_stream = [backend](int d) {
        return backend->queue(Device{DeviceType::cuda, d});
      };
  }
  impl->name = detail::concat("group '", options.name, "' rank ", rank, ": ");
  impl->timeout_ms = options.timeout.count();
  impl->set_device();
  const std::string what = impl->name + "creating the NCCL communicator";

  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  Tensor bytes = Tensor::empty(Shape{static_cast<int64_t>(sizeof id)}, DType::u8,
                               MemCategory::communication, nullptr, Device::cpu());
  if (rank == 0) impl->check(ncclGetUniqueId(&id), nullptr, "ncclGetUniqueId", what);
  std::memcpy(bytes.raw_data(), &id, sizeof id);
  bootstrap.broadcast(bytes, 0)->wait();
  std::memcpy(&id, bytes.raw_data(), sizeof id);

  ncclConfig_t config = nonblocking_config();
  impl->check(ncclCommInitRankConfig(&impl->comm, size, id, rank, &config), impl->comm,
              "ncclCommInitRankConfig", what);
  if (!impl->comm) impl->fail(what + ": ncclCommInitRankConfig gave no communicator");
  impl->wait_comm(impl->comm, deadline, what);
  impl->setup(rank, size, deadline);
  return std::make_shared<NcclGroup>(std::move(impl), rank, size, std::move(options));
}

NcclGroup::NcclGroup(std::unique_ptr<Impl> impl, int rank, int size, ProcessGroupOptions options)
    : ProcessGroup(rank, size, std::move(options)), impl_(std::move(impl)) {
  charge_memory(static_cast<int64_t>(impl_->scratch_bytes));  // released by ~ProcessGroup
  start();
}

NcclGroup::~NcclGroup() {
  stop();
  impl_->release();
}

int NcclGroup::device_index() const {
  return impl_->device;
}

Device NcclGroup::home_device() const {
  return Device{DeviceType::cuda, impl_->device};
}

void NcclGroup::on_fatal(const std::string&) {
  impl_->abort_all();
}

void NcclGroup::run_collective(const CollectiveOp& op, Clock::time_point deadline) {
  Impl& m = *impl_;
  if (m.aborted) throw CommError(op.describe() + ": the NCCL communicator was aborted earlier");
  m.set_device();
  const std::string what = op.describe();

  if (op.type == OpType::split) {
    // The (color, key) exchange of ProcessGroup::split: CPU tensors, through the scratch.
    char* mine = static_cast<char*>(m.scratch) + 16 * rank();
    cuda_check(cudaMemcpyAsync(mine, op.in.raw_data(), 16, cudaMemcpyHostToDevice, m.stream), what);
    m.check(ncclGroupStart(), m.comm, "ncclGroupStart", what);
    m.check(ncclAllGather(mine, m.scratch, 2, ncclInt64, m.comm, m.stream), m.comm, "ncclAllGather",
            what);
    m.check(ncclGroupEnd(), m.comm, "ncclGroupEnd", what);
    m.wait_comm(m.comm, deadline, what);
    Event done(what.c_str());
    cuda_check(cudaEventRecord(done.e, m.stream), what);
    m.wait_event(done.e, m.comm, deadline, what);
    cuda_check(cudaMemcpyAsync(bytes_of(op.out), m.scratch, 16 * static_cast<size_t>(size()),
                               cudaMemcpyDeviceToHost, m.stream),
               what);
    cuda_check(cudaStreamSynchronize(m.stream), what);
    return;
  }

  m.check_device(op, op.in);
  m.check_device(op, op.out);
  // Nothing to move (the count is the same on every rank, Note [Fingerprints]).
  if (op.type != OpType::barrier && op.in.numel() == 0 && op.out.numel() == 0) return;
  Event ready;
  if (op.type != OpType::barrier) ready = m.compute_ready(what);
  if (ready.e)
    cuda_check(cudaStreamWaitEvent(m.stream, ready.e, 0), what + ": cudaStreamWaitEvent");

  const int w = size();
  const int r = rank();
  m.check(ncclGroupStart(), m.comm, "ncclGroupStart", what);
  switch (op.type) {
    case OpType::barrier:
      m.check(ncclAllReduce(m.scratch, m.scratch, 1, ncclUint8, ncclSum, m.comm, m.stream), m.comm,
              "ncclAllReduce", what);
      break;
    case OpType::all_reduce:
      m.check(ncclAllReduce(cptr(op.in), mptr(op.out), static_cast<size_t>(op.in.numel()),
                            nccl_type(op.in.dtype()), nccl_op(op.reduce), m.comm, m.stream),
              m.comm, "ncclAllReduce", what);
      break;
    case OpType::broadcast:
      m.check(ncclBroadcast(cptr(op.in), mptr(op.out), static_cast<size_t>(op.in.numel()),
                            nccl_type(op.in.dtype()), op.root, m.comm, m.stream),
              m.comm, "ncclBroadcast", what);
      break;
    case OpType::reduce_scatter: {
      // Note [NCCL uneven chunks]
      const int64_t n = op.in.numel();
      const ncclDataType_t type = nccl_type(op.in.dtype());
      if (n % w == 0) {
        m.check(ncclReduceScatter(cptr(op.in), mptr(op.out), static_cast<size_t>(n / w), type,
                                  nccl_op(op.reduce), m.comm, m.stream),
                m.comm, "ncclReduceScatter", what);
        break;
      }
      for (int j = 0; j < w; ++j) {
        const Chunk c = chunk_of(n, w, j);
        if (c.size == 0) continue;
        m.check(ncclReduce(at(op.in, c.offset), mptr(op.out), static_cast<size_t>(c.size), type,
                           nccl_op(op.reduce), j, m.comm, m.stream),
                m.comm, "ncclReduce", what);
      }
      break;
    }
    case OpType::all_gather: {
      const int64_t n = op.out.numel();
      const ncclDataType_t type = nccl_type(op.out.dtype());
      if (n % w == 0) {
        m.check(ncclAllGather(cptr(op.in), mptr(op.out), static_cast<size_t>(n / w), type, m.comm,
                              m.stream),
                m.comm, "ncclAllGather", what);
        break;
      }
      for (int j = 0; j < w; ++j) {
        const Chunk c = chunk_of(n, w, j);
        if (c.size == 0) continue;
        const void* send = j == r ? cptr(op.in) : at(op.out, c.offset);
        m.check(ncclBroadcast(send, at(op.out, c.offset), static_cast<size_t>(c.size), type, j,
                              m.comm, m.stream),
                m.comm, "ncclBroadcast", what);
      }
      break;
    }
    case OpType::all_to_all: {
      const int64_t n = op.in.numel();
      const ncclDataType_t type = nccl_type(op.in.dtype());
      const int64_t block = chunk_of(n, w, r).size;
      for (int j = 0; j < w; ++j) {
        const Chunk c = chunk_of(n, w, j);
        if (c.size > 0)
          m.check(
              ncclSend(at(op.in, c.offset), static_cast<size_t>(c.size), type, j, m.comm, m.stream),
              m.comm, "ncclSend", what);
        if (block > 0)
          m.check(ncclRecv(at(op.out, j * block), static_cast<size_t>(block), type, j, m.comm,
                           m.stream),
                  m.comm, "ncclRecv", what);
      }
      break;
    }
    default:
      ncclGroupEnd();
      throw CommError(what + ": not a collective the nccl group runs");
  }
  m.check(ncclGroupEnd(), m.comm, "ncclGroupEnd", what);
  m.wait_comm(m.comm, deadline, what);

  Event done(what.c_str());
  cuda_check(cudaEventRecord(done.e, m.stream), what + ": cudaEventRecord");
  if (op.type != OpType::barrier) m.compute_after(done, what);
  m.wait_event(done.e, m.comm, deadline, what);
}

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

std::shared_ptr<ProcessGroup> NcclGroup::make_subgroup(int color, const std::vector<int>& members,
                                                       uint64_t, ProcessGroupOptions options) {
  Impl& m = *impl_;
  if (m.aborted) throw CommError("split: the NCCL communicator was aborted earlier");
  m.set_device();
  const auto deadline = Clock::now() + options.timeout;
  int index = 0;
  if (color >= 0)
    index = static_cast<int>(std::find(members.begin(), members.end(), rank()) - members.begin());
  const std::string what = "split: ncclCommSplit";
  ncclConfig_t config = nonblocking_config();
  // The child belongs to `impl` at once (the split writes it there: Note [Non-blocking split]),
  // so that a failure from here on aborts it too.
  auto impl = std::make_unique<Impl>();
  impl->device = m.device;
  impl->compute_stream = m.compute_stream;
  impl->name = detail::concat("group '", options.name, "' rank ", index, ": ");
  impl->timeout_ms = options.timeout.count();
  m.check(
      ncclCommSplit(m.comm, color >= 0 ? color : NCCL_SPLIT_NOCOLOR, index, &impl->comm, &config),
      m.comm, "ncclCommSplit", what);
  if (color < 0) {  // no communicator comes back
    m.wait_comm(m.comm, deadline, what);
    return nullptr;
  }
  m.await_split(m.comm, &impl->comm, deadline, what);
  impl->setup(index, static_cast<int>(members.size()), deadline);
  return std::make_shared<NcclGroup>(std::move(impl), index, static_cast<int>(members.size()),
                                     std::move(options));
}

namespace {

// Note [Device groups]: a run with ranks on CUDA devices gets an NCCL group wherever this
// library is linked in.
const bool g_registered = [] {
  register_device_group(DeviceType::cuda, "nccl",
                        [](ProcessGroup& bootstrap, Device device, ProcessGroupOptions options) {
                          return make_nccl_group(bootstrap, device.index, std::move(options));
                        });
  return true;
}();

}  // namespace

}  // namespace braid::comm
