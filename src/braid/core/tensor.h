// Tensor: a handle to shared Storage plus an element offset, a shape and a dtype. Always
// contiguous, row-major. Views are reshapes (view) and ranges of the leading dimension
// (narrow) or of the flat buffer (flat_range): enough for flat buffers, buckets and shards.
// Copying a Tensor copies the handle, never the data (use clone()).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "braid/core/device.h"
#include "braid/core/device_backend.h"
#include "braid/core/dtype.h"
#include "braid/core/error.h"
#include "braid/core/memory_tracker.h"
#include "braid/core/rng.h"
#include "braid/core/shape.h"
#include "braid/core/storage.h"

namespace braid {

class Tensor {
 public:
  Tensor() = default;  // undefined tensor

  // Allocation is charged to the thread's MemoryScope tracker and category, on the thread's
  // default device (current_device(): the CPU unless a DeviceScope says otherwise).
  static Tensor empty(const Shape& shape, DType dtype = DType::f32,
                      Device device = current_device());
  // Explicit category (tracker still from the scope).
  static Tensor empty(const Shape& shape, DType dtype, MemCategory category);
  // Fully explicit.
  static Tensor empty(const Shape& shape, DType dtype, MemCategory category,
                      std::shared_ptr<MemoryTracker> tracker, Device device = current_device());
  // Host memory page-locked for a device's copies where a CUDA backend is registered, else
  // ordinary host memory (Note [Pinned host memory]); tracker from the scope.
  static Tensor pinned(const Shape& shape, DType dtype, MemCategory category);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  // Fully explicit, as empty. A large host allocation comes zero from the kernel, its pages
  // faulted in where first touched (Note [Large host allocations], storage.cpp): no memset.
  static Tensor zeros(const Shape& shape, DType dtype, MemCategory category,
                      std::shared_ptr<MemoryTracker> tracker, Device device = current_device());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32);
  // Normal(0, stddev) / uniform [lo, hi) drawn in f32 from rng, then converted to dtype.
  static Tensor randn(const Shape& shape, Rng& rng, float stddev = 1.0f, DType dtype = DType::f32);
  static Tensor uniform(const Shape& shape, Rng& rng, float lo, float hi, DType dtype = DType::f32);
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int dim() const { return shape_.dim(); }
  int64_t size(int i) const { return shape_[i]; }
  int64_t numel() const { return shape_.numel(); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  bool is_pinned() const { return storage_ && storage_->pinned(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  int64_t offset() const { return offset_; }  // in elements
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // Host access: throws for a tensor on another device (Note [Device backends]).
  void* raw_data();
  const void* raw_data() const;
  // The address on the tensor's own device (a device pointer for a device tensor): for kernels
  // and backends that know where the bytes are.
  void* device_data();
  const void* device_data() const;
  template <typename T>
  T* data() {
    check_dtype(dtype_of<T>::value);
    return static_cast<T*>(raw_data());
  }
  template <typename T>
  const T* data() const {
    check_dtype(dtype_of<T>::value);
    return static_cast<const T*>(raw_data());
  }

  Tensor view(const Shape& shape) const;                   // same numel, shares data
  Tensor narrow(int64_t start, int64_t length) const;      // rows [start, start+length) of dim 0
  Tensor flat_range(int64_t offset, int64_t count) const;  // 1-D view of the flat elements
  Tensor flatten() const { return view(Shape{numel()}); }
  // The same bytes as a 1-D tensor of `dtype` (shares data): its byte offset and size must be
  // whole elements of dtype. as_bytes(): as u8.
  Tensor reinterpret(DType dtype) const;
  Tensor as_bytes() const { return reinterpret(DType::u8); }

  Tensor clone() const;            // same category and device as the source storage
  Tensor to(Device device) const;  // a copy on `device` (same category, dtype and shape)
  Tensor to(DType dtype) const;    // converting copy (clone if same dtype)
  void copy_(const Tensor& src);   // same numel; converts dtype; any devices
  void zero_();
  void fill_(double value);
  float item() const;  // numel == 1, as float
  std::vector<float> to_f32_vector() const;
  bool shares_storage(const Tensor& o) const { return storage_ && storage_ == o.storage_; }

 private:
  // A fresh Storage of shape's bytes (pinned: Note [Pinned host memory]; zeroed: all zero).
  static Tensor allocate(const Shape& shape, DType dtype, MemCategory category,
                         std::shared_ptr<MemoryTracker> tracker, Device device, bool pinned,
                         bool zeroed = false);
  void check_dtype(DType want) const;
  void check_host() const;
  void copy_across_devices(const Tensor& src);
  Tensor to_default_device() const;  // *this, or a copy on current_device()

  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::f32;
};

// Element conversion helpers used by copy_ and by kernels that accept any float dtype.
void convert_to_f32(const void* src, DType src_dtype, float* dst, int64_t n);
void convert_from_f32(const float* src, void* dst, DType dst_dtype, int64_t n);

}  // namespace braid
