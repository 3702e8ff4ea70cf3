#include "braid/core/storage.h"

#include <cstdlib>
#include <new>

#include "braid/core/device_backend.h"
#include "braid/core/error.h"

namespace braid {

std::string Device::str() const {
  return type == DeviceType::cpu ? "cpu" : "cuda:" + std::to_string(index);
}

Storage::Storage(size_t nbytes, Device device, MemCategory category,
                 std::shared_ptr<MemoryTracker> tracker, bool pinned)
    : nbytes_(nbytes), device_(device), category_(category), tracker_(std::move(tracker)) {
  if (!device.is_cpu()) {
    DeviceBackend& backend = require_device_backend(device);
    if (tracker_) tracker_->charge(category_, static_cast<int64_t>(nbytes_));
    capacity_ = nbytes_;
    try {
      data_ = backend.allocate(nbytes_, device);
    } catch (...) {
      if (tracker_) tracker_->release(category_, static_cast<int64_t>(nbytes_));
      throw;
    }
    return;
  }
  if (tracker_) tracker_->charge(category_, static_cast<int64_t>(nbytes_));
  const size_t alignment = nbytes_ >= kPageAlignedFrom ? kPageAlignment : kSmallAlignment;
  capacity_ = (nbytes_ + alignment - 1) / alignment * alignment;
  if (capacity_ == 0) capacity_ = alignment;
  if (DeviceBackend* backend = pinned ? device_backend(DeviceType::cuda) : nullptr) {
    // Note [Pinned host memory]: page-aligned, so the alignment above holds too.
    data_ = capacity_ < nbytes_ ? nullptr : backend->allocate_pinned(capacity_);
    if (data_) {
      pinned_by_ = backend;
      return;
    }
  }
  // capacity_ < nbytes_: the rounding wrapped around, which no allocator could satisfy.
  data_ = capacity_ < nbytes_ ? nullptr : std::aligned_alloc(alignment, capacity_);
  if (!data_) {
    if (tracker_) tracker_->release(category_, static_cast<int64_t>(nbytes_));
    throw OutOfMemory("out of host memory allocating " + format_bytes(nbytes_) + " of " +
                      mem_category_name(category_));
  }
}

Storage::~Storage() {
  if (pinned_by_) {
    pinned_by_->release_pinned(data_);
  } else if (device_.is_cpu()) {
    std::free(data_);
  } else if (data_) {
    require_device_backend(device_).release(data_, nbytes_, device_);
  }
  if (tracker_) tracker_->release(category_, static_cast<int64_t>(nbytes_));
}

}  // namespace braid
