// What the NCCL group's files share (nccl_group.cpp: set-up, collectives, subgroups;
// nccl_p2p.cpp: send/recv): CUDA and NCCL helpers and the group's state, NcclGroup::Impl.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <string>
#include <thread>

#include "braid/comm/chunking.h"
#include "braid/comm/device_group.h"
#include "braid/comm/nccl/nccl_group.h"
#include "braid/core/device_backend.h"
#include "braid/core/error.h"

namespace braid::comm {

namespace nccl_impl {

using Clock = ProcessGroup::Clock;

// Scratch for barrier (1 byte) and split's (color, key) exchange (16 bytes per rank).
constexpr size_t kMinScratch = 256;

inline void cuda_check(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) [[likely]]
    return;
  throw CommError(
      detail::concat(what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
}

inline ncclDataType_t nccl_type(DType t) {
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

inline ncclRedOp_t nccl_op(ReduceOp op) {
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

inline ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // Note [NCCL streams]: every wait honours the deadline
  return config;
}

inline const void* cptr(const Tensor& t) {
  return t.device_data();
}
inline void* mptr(const Tensor& t) {
  return const_cast<void*>(t.device_data());
}
inline char* at(const Tensor& t, int64_t elements) {
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

}  // namespace nccl_impl

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
    nccl_impl::Event ready;  // on the compute stream when the op started (null: none to wait for)
    nccl_impl::Event done;   // on the lane's stream after the send/recv, once enqueued
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
      nccl_impl::cuda_check(cudaSetDevice(device),
                            detail::concat("nccl: cudaSetDevice(", device, ")"));
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
    nccl_impl::poll_until([&] {
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
    nccl_impl::poll_until([&] {
      if (std::atomic_ref<ncclComm_t>(*slot).load(std::memory_order_acquire)) return true;
      if (Clock::now() > deadline) fail(timed_out(what));
      return false;
    });
    wait_comm(*slot, deadline, what);
  }

  // The event has completed (the work before it is in device memory), within the deadline.
  void wait_event(cudaEvent_t e, ncclComm_t c, Clock::time_point deadline,
                  const std::string& what) {
    nccl_impl::poll_until([&] {
      cudaError_t q = cudaEventQuery(e);
      if (q == cudaSuccess) return true;
      if (q != cudaErrorNotReady) {
        try {
          nccl_impl::cuda_check(q, what);
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
  nccl_impl::Event compute_ready(const std::string& what) {
    if (compute_stream) {
      auto s = static_cast<cudaStream_t>(compute_stream(device));
      nccl_impl::Event ready(what.c_str());
      nccl_impl::cuda_check(cudaEventRecord(ready.e, s),
                            what + ": cudaEventRecord on the compute stream");
      return ready;
    }
    if (DeviceBackend* backend = device_backend(DeviceType::cuda))
      backend->synchronize(Device{DeviceType::cuda, device});
    return {};
  }

  // Later work on the compute stream waits for `done`.
  void compute_after(const nccl_impl::Event& done, const std::string& what) {
    if (!compute_stream) return;
    auto s = static_cast<cudaStream_t>(compute_stream(device));
    nccl_impl::cuda_check(cudaStreamWaitEvent(s, done.e, 0),
                          what + ": cudaStreamWaitEvent (compute)");
  }

  // The communicator's stream, scratch and (size > 1) send/recv lanes. Collective over comm.
  void setup(int rank, int size, Clock::time_point deadline) {
    set_device();
    const std::string what = name + "setting up NCCL";
    nccl_impl::cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), what);
    if (size > 1) {
      for (Lane& lane : lanes) {
        ncclConfig_t config = nccl_impl::nonblocking_config();
        check(ncclCommSplit(comm, 0, rank, &lane.comm, &config), comm, "ncclCommSplit", what);
        await_split(comm, &lane.comm, deadline, what);  // Note [Non-blocking split]
        nccl_impl::cuda_check(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking), what);
      }
    }
    scratch_bytes = std::max(nccl_impl::kMinScratch, 16 * static_cast<size_t>(size));
    nccl_impl::cuda_check(cudaMalloc(&scratch, scratch_bytes),
                          what + ": cudaMalloc of the scratch");
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

}  // namespace braid::comm
