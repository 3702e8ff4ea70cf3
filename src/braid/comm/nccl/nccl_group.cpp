// NcclGroup (nccl_group.h): set-up over a bootstrap group, collectives, subgroups; send and
// recv are in nccl_p2p.cpp, the state both use in nccl_impl.h.
#include "braid/comm/nccl/nccl_group.h"

#include "braid/comm/nccl/nccl_impl.h"

namespace braid::comm {

using namespace nccl_impl;

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
