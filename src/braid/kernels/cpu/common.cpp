#include "braid/kernels/cpu/common.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <memory>

#include "braid/core/memory_tracker.h"
#include "braid/kernels/device.h"

namespace braid::kernels::cpu {

void check_cpu(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t && t->defined() && !t->device().is_cpu() && !simulated(t->device()))
      unsupported_device(t->device(), op);
  }
}

void check_defined(const char* op, const char* name, const Tensor& t) {
  BRAID_CHECK(t.defined(), op, ": ", name, " is an undefined tensor");
}

void check_dtype(const char* op, const char* name, const Tensor& t, DType want) {
  check_defined(op, name, t);
  BRAID_CHECK(t.dtype() == want, op, ": ", name, " has dtype ", dtype_name(t.dtype()),
              ", expected ", dtype_name(want));
}

void check_float(const char* op, const char* name, const Tensor& t) {
  check_defined(op, name, t);
  BRAID_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16 || t.dtype() == DType::f16, op,
              ": ", name, " has dtype ", dtype_name(t.dtype()), ", expected f32, bf16 or f16");
}

void check_same_dtype(const char* op, const char* name, const Tensor& t, const char* ref_name,
                      const Tensor& ref) {
  check_defined(op, name, t);
  BRAID_CHECK(t.dtype() == ref.dtype(), op, ": ", name, " has dtype ", dtype_name(t.dtype()),
              " but ", ref_name, " has dtype ", dtype_name(ref.dtype()));
}

void check_param_grad(const char* op, const char* name, const Tensor& t, const char* ref_name,
                      const Tensor& ref) {
  check_defined(op, name, t);
  BRAID_CHECK(t.dtype() == ref.dtype() || t.dtype() == DType::f32, op, ": ", name, " has dtype ",
              dtype_name(t.dtype()), ", expected f32 or ", dtype_name(ref.dtype()),
              " (the dtype of ", ref_name, ")");
}

void add_sums(Tensor& grad, const double* sums, int64_t n) {
  dispatch_float(grad.dtype(), "add_sums", [&](auto tag) {
    using T = decltype(tag);
    T* g = grad.data<T>();
    for (int64_t i = 0; i < n; ++i) st(&g[i], static_cast<float>(ld(&g[i]) + sums[i]));
  });
}

void check_shape(const char* op, const char* name, const Tensor& t, const Shape& want) {
  check_defined(op, name, t);
  BRAID_CHECK(t.shape() == want, op, ": ", name, " has shape ", t.shape().str(), ", expected ",
              want.str());
}

void check_numel(const char* op, const char* name, const Tensor& t, int64_t want) {
  check_defined(op, name, t);
  BRAID_CHECK(t.numel() == want, op, ": ", name, " of shape ", t.shape().str(), " has ", t.numel(),
              " elements, expected ", want);
}

int64_t cols_of(const Tensor& t) {
  return t.dim() == 0 ? 1 : t.size(t.dim() - 1);
}
int64_t rows_of(const Tensor& t) {
  int64_t c = cols_of(t);
  return c == 0 ? 0 : t.numel() / c;
}

namespace {

constexpr int kRawSlots = 10;
constexpr int kF64Slots = 4;

struct ScratchBuffer {
  std::byte* data = nullptr;
  size_t size = 0;
  MemoryCharge charge{MemCategory::scratch};  // releases itself when the thread exits
  ScratchBuffer() = default;
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  ~ScratchBuffer() { std::free(data); }
};

// The slow path of scratch_raw: move the charge to this thread's tracker, then grow.
[[gnu::noinline]] void* scratch_grow(ScratchBuffer& b, size_t bytes,
                                     const std::shared_ptr<MemoryTracker>& tracker) {
  b.charge.retarget(tracker);  // OutOfMemory: still charged where it was
  if (b.size >= bytes) return b.data;
  const size_t want = scratch_grown(b.size, bytes);
  b.charge.resize(static_cast<int64_t>(want));  // OutOfMemory: nothing allocated
  auto* p = static_cast<std::byte*>(std::aligned_alloc(64, want));
  if (!p) {
    b.charge.resize(static_cast<int64_t>(b.size));
    throw OutOfMemory(
        detail::concat("kernel scratch: out of host memory allocating ", format_bytes(want)));
  }
  std::free(b.data);
  b.data = p;
  b.size = want;
  return p;
}

// Note [Kernel scratch]: the calling thread's buffers; slots kRawSlots.. are scratch_f64's.
void* scratch_get(int index, size_t bytes) {
  thread_local std::array<ScratchBuffer, kRawSlots + kF64Slots> buffers;
  ScratchBuffer& b = buffers[static_cast<size_t>(index)];
  const std::shared_ptr<MemoryTracker>& tracker = MemoryScope::current_tracker();
  if (b.size >= bytes && b.charge.tracker() == tracker) [[likely]]
    return b.data;
  return scratch_grow(b, bytes, tracker);
}

}  // namespace

void* scratch_raw(int slot, size_t bytes) {
  BRAID_CHECK(slot >= 0 && slot < kRawSlots, "scratch slot ", slot, " out of range");
  return scratch_get(slot, bytes);
}

double* scratch_f64(int slot, int64_t n) {
  BRAID_CHECK(slot >= 0 && slot < kF64Slots, "scratch_f64 slot ", slot, " out of range");
  return static_cast<double*>(
      scratch_get(kRawSlots + slot, static_cast<size_t>(std::max<int64_t>(n, 0)) * sizeof(double)));
}

}  // namespace braid::kernels::cpu
