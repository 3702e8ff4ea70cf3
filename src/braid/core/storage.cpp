#include "braid/core/storage.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

#include "braid/core/device_backend.h"
#include "braid/core/error.h"

namespace braid {

namespace {

// Note [Large host allocations]: an allocation of Storage::kLargeHostFrom bytes or more is a fresh
// mapping every time (launch::tune_allocator keeps smaller ones in the heap), and touching its
// pages one 4 KiB fault at a time is what made it slow: memset of a fresh GiB took 0.55-0.83 s on
// the project's VM, against 0.09-0.2 s when the mapping is 2 MiB-aligned, advised for transparent
// huge pages and populated in one call (MADV_POPULATE_WRITE, Linux 5.14), the same pages after
// either 0.04 s. A checkpoint load or a start allocates its parameters, gradients and optimizer
// state this way, as do a large model's logits every step. PyTorch's CPU allocator advises huge
// pages the same way (THP_MEM_ALLOC_ENABLE). Where the kernel refuses either call, the pages
// fault in on first touch as before.
constexpr size_t kHugePage = size_t{2} << 20;

void* allocate_host(size_t capacity, size_t alignment) {
  if (capacity < Storage::kLargeHostFrom) return std::aligned_alloc(alignment, capacity);
  const size_t whole = (capacity + kHugePage - 1) / kHugePage * kHugePage;
  if (whole < capacity) return nullptr;
  void* p = std::aligned_alloc(kHugePage, whole);
  if (!p) return nullptr;
#ifdef MADV_HUGEPAGE
  ::madvise(p, whole, MADV_HUGEPAGE);
#endif
#ifdef MADV_POPULATE_WRITE
  ::madvise(p, whole, MADV_POPULATE_WRITE);
#endif
  return p;
}

}  // namespace

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
  data_ = capacity_ < nbytes_ ? nullptr : allocate_host(capacity_, alignment);
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
  if (tracker_ && charged_) tracker_->release(category_, static_cast<int64_t>(nbytes_));
}

void Storage::uncharge() {
  BRAID_CHECK(charged_, "Storage::uncharge: already uncharged");
  if (tracker_) tracker_->release(category_, static_cast<int64_t>(nbytes_));
  charged_ = false;
}

void Storage::recharge(std::shared_ptr<MemoryTracker> tracker) {
  BRAID_CHECK(!charged_, "Storage::recharge: still charged");
  if (tracker) tracker->charge(category_, static_cast<int64_t>(nbytes_));
  tracker_ = std::move(tracker);
  charged_ = true;
}

}  // namespace braid
