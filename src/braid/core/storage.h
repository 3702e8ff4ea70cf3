// Storage: one owned allocation, charged to a MemoryTracker category for its whole life.
// Tensors share Storage through shared_ptr. On a device other than the CPU the bytes come from
// that device's backend (Note [Device backends], device_backend.h) and data() is a device
// address.
// Alignment: allocations of 64 KiB or more start on a 4096-byte boundary and their size is
// rounded up to a multiple of 4096 bytes (capacity()), so they can be handed to O_DIRECT file
// I/O as they are (parallel/zero/offload_file.h); smaller ones are 64-byte aligned and rounded
// up to 64 (host memory only). Host allocations of 64 MiB or more are their own mapping, start on
// a 2 MiB boundary and fault in as transparent huge pages (Note [Large host allocations],
// storage.cpp).
// The tracker is charged the requested nbytes, not the capacity.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "braid/core/device.h"
#include "braid/core/memory_tracker.h"

namespace braid {

class DeviceBackend;

class Storage {
 public:
  static constexpr size_t kPageAlignment = 4096;
  static constexpr size_t kPageAlignedFrom = size_t{64} << 10;  // 64 KiB
  static constexpr size_t kSmallAlignment = 64;
  // Host allocations of this size or more are fresh huge-page mappings (see above).
  static constexpr size_t kLargeHostFrom = size_t{64} << 20;  // 64 MiB

  // Allocates nbytes, uninitialised or (zeroed) all zero: a large host allocation's fresh
  // mapping is zero as it comes, faulted in where first touched (Note [Large host allocations]).
  // tracker may be null (untracked). pinned (host memory only): page-locked by the CUDA backend
  // where one is registered (Note [Pinned host memory], device_backend.h), else ordinary host
  // memory.
  Storage(size_t nbytes, Device device, MemCategory category,
          std::shared_ptr<MemoryTracker> tracker, bool pinned = false, bool zeroed = false);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  size_t capacity() const { return capacity_; }  // bytes allocated: nbytes rounded up, see above
  Device device() const { return device_; }
  MemCategory category() const { return category_; }
  const std::shared_ptr<MemoryTracker>& tracker() const { return tracker_; }
  bool pinned() const { return pinned_by_ != nullptr; }  // page-locked host memory

  // Note [Recycled tensors] (tensor_pool.h): while a pool keeps this storage for reuse its bytes
  // are handed back to the tracker (uncharge), and charged to `tracker` again when it is reused
  // (recharge: throws OutOfMemory past the budget, as an allocation would). The tracker so
  // counts what tensors hold, not what pools keep.
  void uncharge();
  void recharge(std::shared_ptr<MemoryTracker> tracker);

 private:
  void* data_ = nullptr;
  DeviceBackend* pinned_by_ = nullptr;  // the backend that pinned data_, which frees it
  size_t mapped_ = 0;                   // host: the bytes of data_'s own mapping (0: the heap)
  size_t nbytes_ = 0;
  size_t capacity_ = 0;
  Device device_;
  MemCategory category_;
  std::shared_ptr<MemoryTracker> tracker_;
  bool charged_ = true;  // false while a pool keeps it
};

}  // namespace braid
