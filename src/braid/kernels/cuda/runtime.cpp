#include "braid/kernels/cuda/runtime.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "braid/core/error.h"
#include "braid/kernels/cuda/allocator.h"

namespace braid::kernels::cuda {

namespace {

struct DeviceState {
  cudaStream_t stream = nullptr;
  cudaDeviceProp props{};
  bool ready = false;
};

std::mutex g_mu;
std::vector<DeviceState> g_devices;
std::atomic<int> g_fusion_override{0};

DeviceState& state(int index) {
  std::lock_guard<std::mutex> lock(g_mu);
  const int n = device_count();
  BRAID_CHECK(index >= 0 && index < n, "cuda:", index, " does not exist (", n,
              " CUDA device(s) visible)");
  if (g_devices.empty()) g_devices.resize(n);
  DeviceState& s = g_devices[index];
  if (!s.ready) {
    set_device(index);
    BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking),
                     "creating braid's stream");
    BRAID_CUDA_CHECK(cudaGetDeviceProperties(&s.props, index), "cudaGetDeviceProperties");
    s.ready = true;
  }
  return s;
}

}  // namespace

bool fusion_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("BRAID_CUDA_FUSION");
    return e != nullptr && std::strcmp(e, "1") == 0;
  }();
  const int o = g_fusion_override.load();
  return o == 0 ? on : o == 2;
}

void set_fusion_for_testing(int mode) {
  g_fusion_override.store(mode);
}

void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line) {
  BRAID_THROW(what, ": CUDA error ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ") at ",
              file, ":", line);
}

int device_count() {
  static const int n = [] {
    int c = 0;
    if (cudaGetDeviceCount(&c) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return c;
  }();
  return n;
}

bool available() {
  return device_count() > 0;
}

void set_device(int index) {
  int cur = -1;
  BRAID_CUDA_CHECK(cudaGetDevice(&cur), "cudaGetDevice");
  if (cur != index) BRAID_CUDA_CHECK(cudaSetDevice(index), "cudaSetDevice");
}

int current_device_index() {
  int cur = 0;
  BRAID_CUDA_CHECK(cudaGetDevice(&cur), "cudaGetDevice");
  return cur;
}

cudaStream_t stream(int device_index) {
  return state(device_index).stream;
}

cudaStream_t stream() {
  return stream(current_device_index());
}

const cudaDeviceProp& properties(int device_index) {
  return state(device_index).props;
}

void check_cuda(const char* op, std::initializer_list<const Tensor*> tensors) {
  int index = -1;
  for (const Tensor* t : tensors) {
    if (!t || !t->defined()) continue;
    const Device d = t->device();
    BRAID_CHECK(d.type == DeviceType::cuda, op, ": a tensor of shape ", t->shape().str(), " is on ",
                d.str(),
                " while the others are on a CUDA device (every argument must be on one "
                "device)");
    BRAID_CHECK(index < 0 || index == d.index, op, ": tensors on cuda:", index, " and ", d.str(),
                " (every argument must be on one device)");
    index = d.index;
  }
  if (index >= 0) set_device(index);
}

Scratch::Scratch(size_t nbytes)
    : nbytes_(nbytes), device_(current_device_index()), tracker_(MemoryScope::current_tracker()) {
  if (tracker_) tracker_->charge(MemCategory::scratch, static_cast<int64_t>(nbytes_));
  try {
    ptr_ = device_allocate(nbytes_, device_);
  } catch (...) {
    if (tracker_) tracker_->release(MemCategory::scratch, static_cast<int64_t>(nbytes_));
    throw;
  }
}

Scratch::~Scratch() {
  reset();
}

Scratch::Scratch(Scratch&& o) noexcept
    : ptr_(o.ptr_), nbytes_(o.nbytes_), device_(o.device_), tracker_(std::move(o.tracker_)) {
  o.ptr_ = nullptr;
  o.nbytes_ = 0;
}

Scratch& Scratch::operator=(Scratch&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = o.ptr_;
    nbytes_ = o.nbytes_;
    device_ = o.device_;
    tracker_ = std::move(o.tracker_);
    o.ptr_ = nullptr;
    o.nbytes_ = 0;
  }
  return *this;
}

void Scratch::reset() {
  if (!ptr_) return;
  device_free(ptr_, device_);
  if (tracker_) tracker_->release(MemCategory::scratch, static_cast<int64_t>(nbytes_));
  ptr_ = nullptr;
  nbytes_ = 0;
}

void copy_to_host(void* dst, const void* src, size_t nbytes) {
  cudaStream_t s = stream();
  BRAID_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, s), "copy to host");
  BRAID_CUDA_CHECK(cudaStreamSynchronize(s), "copy to host");
}

}  // namespace braid::kernels::cuda
