#include "braid/kernels/cuda/allocator.h"

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/memory_tracker.h"
#include "braid/kernels/cuda/runtime.h"

namespace braid::kernels::cuda {

namespace {

constexpr size_t kSmallLimit = size_t{1} << 20;
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t{2} << 20;

size_t round_size(size_t n) {
  if (n == 0) n = 1;
  const size_t r = n < kSmallLimit ? kSmallRound : kLargeRound;
  return (n + r - 1) / r * r;
}

struct DevicePool {
  std::multimap<size_t, void*> free_blocks;  // rounded size -> block
  std::unordered_map<void*, size_t> live;    // block -> rounded size
  AllocatorStats stats;
};

std::mutex g_mu;
std::vector<DevicePool> g_pools;

DevicePool& pool(int device) {
  if (device >= static_cast<int>(g_pools.size())) g_pools.resize(device + 1);
  return g_pools[device];
}

void release_all_locked(DevicePool& p, int device) {
  if (p.free_blocks.empty()) return;
  set_device(device);
  // Blocks may still be read by queued work (stream-ordered reuse): wait for it first.
  BRAID_CUDA_CHECK(cudaStreamSynchronize(stream(device)), "releasing cached device memory");
  for (auto& [size, ptr] : p.free_blocks) {
    BRAID_CUDA_CHECK(cudaFree(ptr), "cudaFree");
    p.stats.cached -= static_cast<int64_t>(size);
  }
  p.free_blocks.clear();
}

}  // namespace

void* device_allocate(size_t nbytes, int device) {
  const size_t size = round_size(nbytes);
  std::lock_guard<std::mutex> lock(g_mu);
  DevicePool& p = pool(device);
  auto it = p.free_blocks.lower_bound(size);
  void* ptr = nullptr;
  size_t got = size;
  if (it != p.free_blocks.end() && it->first <= 2 * size) {
    got = it->first;
    ptr = it->second;
    p.free_blocks.erase(it);
    p.stats.cached -= static_cast<int64_t>(got);
  } else {
    set_device(device);
    cudaError_t err = cudaMalloc(&ptr, size);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear the sticky-free error state
      release_all_locked(p, device);
      err = cudaMalloc(&ptr, size);
    }
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      throw OutOfMemory("out of device memory on cuda:" + std::to_string(device) + " allocating " +
                        format_bytes(nbytes) + " (braid holds " + format_bytes(p.stats.in_use) +
                        " in use; the device has " + format_bytes(free_b) + " free of " +
                        format_bytes(total_b) + ")");
    }
    BRAID_CUDA_CHECK(err, "cudaMalloc");
    ++p.stats.device_allocs;
  }
  p.live[ptr] = got;
  p.stats.in_use += static_cast<int64_t>(got);
  p.stats.peak_in_use = std::max(p.stats.peak_in_use, p.stats.in_use);
  return ptr;
}

void device_free(void* ptr, int device) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(g_mu);
  DevicePool& p = pool(device);
  auto it = p.live.find(ptr);
  BRAID_CHECK(it != p.live.end(), "device_free: ", ptr, " is not a live block of cuda:", device);
  const size_t size = it->second;
  p.live.erase(it);
  p.stats.in_use -= static_cast<int64_t>(size);
  p.stats.cached += static_cast<int64_t>(size);
  p.free_blocks.emplace(size, ptr);
}

void release_cached(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  release_all_locked(pool(device), device);
}

AllocatorStats allocator_stats(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  return pool(device).stats;
}

void reset_peak(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  DevicePool& p = pool(device);
  p.stats.peak_in_use = p.stats.in_use;
}

std::string allocator_summary(int device) {
  const AllocatorStats s = allocator_stats(device);
  return "cuda:" + std::to_string(device) + " in use " + format_bytes(s.in_use) + " (peak " +
         format_bytes(s.peak_in_use) + "), cached " + format_bytes(s.cached) + ", " +
         std::to_string(s.device_allocs) + " cudaMalloc calls";
}

}  // namespace braid::kernels::cuda
