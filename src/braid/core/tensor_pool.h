// TensorPool: keeps a few freed tensors of a hot path's shapes for reuse.
//
// Note [Recycled tensors]: a buffer of 64 MiB or more is a fresh mapping every time it is
// allocated (Note [Large host allocations], storage.cpp), and the kernel zeroes every page of
// it. A buffer that one step allocates and frees again (the fused LM head's f32 weight
// gradient: 206 MB for GPT-2 medium) so paid a zeroed mapping a step: 250-450 ms of a 7.2 s
// step under DDP on the project's 2-core VM (`--profile`'s "other"), where the populate call
// waits for the host to back the pages. A pool keeps such a tensor when its last user gives it
// back and hands it out again for the same shape, dtype and device, its contents undefined as
// an allocation's. While it waits its bytes are not charged to any tracker (Storage::uncharge):
// the tracker counts what tensors hold, as PyTorch's "allocated" does, and the process's RSS
// also shows what the pool keeps (its "reserved"). A reused tensor is charged to the calling
// thread's tracker then, and a budget refuses it as it would a fresh one. At most `keep`
// tensors wait; a pool frees what it keeps when destroyed or cleared. Host memory only: a
// device's backend caches its own blocks (kernels/cuda/allocator.cpp), and a pool that outlived
// the backend could not free them.
#pragma once

#include <cstddef>
#include <vector>

#include "braid/core/tensor.h"

namespace braid {

class TensorPool {
 public:
  // Keeps up to `keep` tensors of at least min_bytes each: smaller host allocations come from the
  // heap, which reuses its memory itself (launch::tune_allocator).
  explicit TensorPool(size_t keep, size_t min_bytes = Storage::kLargeHostFrom)
      : keep_(keep), min_bytes_(min_bytes) {}
  TensorPool(const TensorPool&) = delete;
  TensorPool& operator=(const TensorPool&) = delete;

  // A kept tensor of this shape and dtype on current_device(), charged to `category` of the
  // calling thread's tracker, or a newly allocated one. Contents undefined.
  Tensor take(const Shape& shape, DType dtype, MemCategory category);
  // Keeps t for a later take() when t is ordinary host memory of at least min_bytes, the whole
  // of its storage, nothing else shares that storage and fewer than `keep` tensors wait; else t
  // is simply released. t is undefined after.
  void give(Tensor&& t);
  void clear() { kept_.clear(); }
  size_t kept() const { return kept_.size(); }

 private:
  size_t keep_, min_bytes_;
  std::vector<Tensor> kept_;  // uncharged (Note [Recycled tensors])
};

}  // namespace braid
