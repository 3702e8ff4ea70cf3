// Storage: one owned, 64-byte aligned allocation, charged to a MemoryTracker category for its
// whole life. Tensors share Storage through shared_ptr.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "braid/core/device.h"
#include "braid/core/memory_tracker.h"

namespace braid {

class Storage {
 public:
  // Allocates nbytes (uninitialised). tracker may be null (untracked).
  Storage(size_t nbytes, Device device, MemCategory category,
          std::shared_ptr<MemoryTracker> tracker);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  MemCategory category() const { return category_; }
  const std::shared_ptr<MemoryTracker>& tracker() const { return tracker_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  MemCategory category_;
  std::shared_ptr<MemoryTracker> tracker_;
};

}  // namespace braid
