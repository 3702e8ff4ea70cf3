// The caching device allocator (Note [Caching allocator]): cudaMalloc is slow and
// synchronises the device, so freed blocks are kept per device in size classes and handed out
// again. Blocks are reused in stream order: every user of device memory queues its work on
// the device's one stream (runtime.h), so a block freed while a kernel still reads it is next
// written only by work queued after that kernel.
//
// Note [Caching allocator]:
// - Sizes are rounded up to 512 bytes below 1 MiB and to 2 MiB above; a request is served by
//   the smallest cached block of its rounded size class or larger within 2x (large blocks are
//   not split).
// - When cudaMalloc fails, every cached block of the device is released (cudaFree) and the
//   allocation is tried once more; a second failure throws OutOfMemory naming the bytes asked,
//   the bytes in use and cached, and the device's free and total memory.
// - Statistics (in use, cached, peak in use) are per device and exact.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace braid::kernels::cuda {

struct AllocatorStats {
  int64_t in_use = 0;         // bytes of live blocks (rounded sizes)
  int64_t cached = 0;         // bytes held in the cache, free for reuse
  int64_t peak_in_use = 0;    // high-water mark of in_use
  int64_t device_allocs = 0;  // cudaMalloc calls made
};

void* device_allocate(size_t nbytes, int device);
void device_free(void* ptr, int device);
// Gives every cached block of the device back to CUDA.
void release_cached(int device);
AllocatorStats allocator_stats(int device);
void reset_peak(int device);
std::string allocator_summary(int device);  // one line for reports

}  // namespace braid::kernels::cuda
