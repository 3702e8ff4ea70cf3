#include "braid/core/tensor_pool.h"

#include <utility>

#include "braid/core/device_backend.h"

namespace braid {

Tensor TensorPool::take(const Shape& shape, DType dtype, MemCategory category) {
  const Device device = current_device();
  for (size_t i = 0; i < kept_.size(); ++i) {
    Tensor& t = kept_[i];
    if (t.shape() != shape || t.dtype() != dtype || t.device() != device ||
        t.storage()->category() != category)
      continue;
    Tensor out = std::move(t);
    kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(i));
    // Past the budget this throws, and `out` frees its bytes without releasing a charge.
    out.storage()->recharge(MemoryScope::current_tracker());
    return out;
  }
  return Tensor::empty(shape, dtype, category);
}

void TensorPool::give(Tensor&& t) {
  Tensor held = std::move(t);
  if (!held.defined() || kept_.size() >= keep_ || held.nbytes() < min_bytes_) return;
  const std::shared_ptr<Storage>& s = held.storage();
  if (s.use_count() != 1 || held.offset() != 0 || s->nbytes() != held.nbytes()) return;
  if (!held.device().is_cpu() || held.is_pinned()) return;  // a device's allocator caches
  s->uncharge();
  kept_.push_back(std::move(held));
}

}  // namespace braid
