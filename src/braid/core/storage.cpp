#include "braid/core/storage.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "braid/core/device_backend.h"
#include "braid/core/error.h"

namespace braid {

namespace {

// Note [Large host allocations]: an allocation of Storage::kLargeHostFrom bytes or more is its
// own mapping (launch::tune_allocator keeps smaller ones in the heap), 2 MiB-aligned and advised
// for transparent huge pages. Touching its pages one 4 KiB fault at a time is what made such
// allocations slow: memset of a fresh GiB took 0.55-0.83 s on the project's VM, against
// 0.09-0.2 s as huge pages, the same pages after either 0.04 s. The pages fault in where they
// are first touched, a huge page at a time, zeroed by the kernel: a fresh mapping reads as zero,
// so a zeroed allocation costs no memset. Populating the mapping at once (MADV_POPULATE_WRITE,
// as this did until 2026-11-28) cost as much (512 MB: populate and memset 0.064 s, memset
// faulting it in 0.063 s) but did it before the memory was used: a checkpoint load allocated the
// optimizer state with the disk idle, where now its reads fault it in while the kernel reads
// ahead (zero3 gpt2-small on 2 ranks: load 0.65-0.74 s -> 0.58-0.61 s, the raw read 0.46-0.55 s).
// PyTorch's CPU allocator advises huge pages the same way (THP_MEM_ALLOC_ENABLE). Where the
// kernel refuses the advice, the pages fault in 4 KiB at a time.
constexpr size_t kHugePage = size_t{2} << 20;

// The mapping's bytes for `capacity` (whole huge pages), 0 when it comes from the heap.
size_t mapped_bytes(size_t capacity) {
  if (capacity < Storage::kLargeHostFrom) return 0;
  const size_t whole = (capacity + kHugePage - 1) / kHugePage * kHugePage;
  return whole < capacity ? SIZE_MAX : whole;
}

// Host memory for `capacity` bytes: `mapped` (mapped_bytes) of a fresh mapping, else the heap.
void* allocate_host(size_t capacity, size_t alignment, size_t mapped) {
  if (mapped == 0) return std::aligned_alloc(alignment, capacity);
  if (mapped == SIZE_MAX || mapped > SIZE_MAX - kHugePage) return nullptr;
  // Over-map by a huge page and unmap what lies before and after the aligned part.
  void* raw = ::mmap(nullptr, mapped + kHugePage, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto at = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (at + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > at) ::munmap(raw, aligned - at);
  const size_t after = at + mapped + kHugePage - (aligned + mapped);
  if (after > 0) ::munmap(reinterpret_cast<void*>(aligned + mapped), after);
  void* p = reinterpret_cast<void*>(aligned);
#ifdef MADV_HUGEPAGE
  ::madvise(p, mapped, MADV_HUGEPAGE);
#endif
  return p;
}

}  // namespace

std::string Device::str() const {
  return type == DeviceType::cpu ? "cpu" : "cuda:" + std::to_string(index);
}

Storage::Storage(size_t nbytes, Device device, MemCategory category,
                 std::shared_ptr<MemoryTracker> tracker, bool pinned, bool zeroed)
    : nbytes_(nbytes), device_(device), category_(category), tracker_(std::move(tracker)) {
  if (!device.is_cpu()) {
    DeviceBackend& backend = require_device_backend(device);
    if (tracker_) tracker_->charge(category_, static_cast<int64_t>(nbytes_));
    capacity_ = nbytes_;
    try {
      data_ = backend.allocate(nbytes_, device);
      if (zeroed && nbytes_ > 0) backend.zero(data_, nbytes_, device);
    } catch (...) {
      if (data_) backend.release(data_, nbytes_, device);
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
      if (zeroed) std::memset(data_, 0, nbytes_);
      return;
    }
  }
  // capacity_ < nbytes_: the rounding wrapped around, which no allocator could satisfy.
  mapped_ = capacity_ < nbytes_ ? 0 : mapped_bytes(capacity_);
  data_ = capacity_ < nbytes_ ? nullptr : allocate_host(capacity_, alignment, mapped_);
  if (!data_) {
    mapped_ = 0;
    if (tracker_) tracker_->release(category_, static_cast<int64_t>(nbytes_));
    throw OutOfMemory("out of host memory allocating " + format_bytes(nbytes_) + " of " +
                      mem_category_name(category_));
  }
  if (zeroed && mapped_ == 0) std::memset(data_, 0, nbytes_);  // a fresh mapping reads as zero
}

Storage::~Storage() {
  if (pinned_by_) {
    pinned_by_->release_pinned(data_);
  } else if (mapped_ > 0) {
    ::munmap(data_, mapped_);
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
