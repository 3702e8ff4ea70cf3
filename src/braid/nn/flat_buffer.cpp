#include "braid/nn/flat_buffer.h"

#include <algorithm>

#include "braid/core/error.h"
#include "braid/kernels/ops.h"

namespace braid::nn {

std::vector<ShardRange> padded_shards(FlatRange range, int world_size) {
  BRAID_CHECK(world_size > 0, "padded_shards: world size must be positive, got ", world_size);
  BRAID_CHECK(range.size >= 0 && range.offset >= 0, "padded_shards: invalid range {", range.offset,
              ", ", range.size, "}");
  const int64_t per_rank = (range.size + world_size - 1) / world_size;
  std::vector<ShardRange> shards(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r) {
    const int64_t begin = std::min(range.size, r * per_rank);
    const int64_t end = std::min(range.size, begin + per_rank);
    shards[static_cast<size_t>(r)] = {range.offset + begin, end - begin, per_rank};
  }
  return shards;
}

FlatBuffer::FlatBuffer(const ParamLayout& layout, bool allocate_grads, DType compute, bool masters)
    : layout_(layout) {
  BRAID_CHECK(is_floating(compute), "FlatBuffer: compute dtype must be f32, bf16 or f16, got ",
              dtype_name(compute));
  for (const ParamInfo& p : layout_.params()) {
    BRAID_CHECK(!p.param->var.defined() || !p.param->var.value().defined(),
                "FlatBuffer: parameter '", p.name,
                "' already has storage (a module tree is materialised once)");
  }
  const int64_t total = layout_.total();
  const std::shared_ptr<MemoryTracker> tracker = MemoryScope::current_tracker();
  if (masters || compute == DType::f32) {
    params_ = Tensor::zeros(Shape{total}, DType::f32, MemCategory::parameters, tracker);
  }
  if (compute == DType::f32) {
    compute_ = params_;
  } else {
    compute_ = Tensor::zeros(Shape{total}, compute, MemCategory::parameters, tracker);
  }
  if (allocate_grads) {
    grads_ = Tensor::zeros(Shape{total}, DType::f32, MemCategory::gradients, tracker);
  }
  for (size_t u = 0; u < layout_.units().size(); ++u) {
    const FlatRange r = unit_range(static_cast<int>(u));
    layout_.bind_unit(static_cast<int>(u), compute_.flat_range(r.offset, r.size),
                      allocate_grads ? grads_.flat_range(r.offset, r.size) : Tensor());
  }
  for (const ParamInfo& p : layout_.params()) {
    entries_.push_back({p.name, p.param, {layout_.flat_offset(p), p.numel}});
  }
}

const FlatBuffer::Entry& FlatBuffer::entry(std::string_view name) const {
  for (const auto& e : entries_) {
    if (e.name == name) return e;
  }
  BRAID_THROW("FlatBuffer: no parameter named '", name, "' (", entries_.size(), " parameters)");
}

void FlatBuffer::sync_compute() {
  if (compute_.shares_storage(params_) || !params_.defined()) return;
  kernels::cast(compute_, params_);
}

void FlatBuffer::zero_grad() {
  if (grads_.defined()) grads_.zero_();
}

void FlatBuffer::init(uint64_t seed) {
  BRAID_CHECK(params_.defined(), "FlatBuffer::init: no master buffer to initialise");
  for (size_t u = 0; u < layout_.units().size(); ++u) {
    const FlatRange r = unit_range(static_cast<int>(u));
    Tensor unit = params_.flat_range(r.offset, r.size);
    layout_.init_unit(static_cast<int>(u), unit, seed);
  }
  sync_compute();
}

}  // namespace braid::nn
