#include "braid/nn/flat_buffer.h"

#include <algorithm>
#include <limits>

#include "braid/core/error.h"

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

FlatBuffer::FlatBuffer(Module& root, bool allocate_grads) {
  auto slots = root.named_parameter_slots();
  int64_t total = 0;
  for (auto& [name, p] : slots) {
    BRAID_CHECK(!p->var.defined(), "FlatBuffer: parameter '", name,
                "' already has storage (a module tree is materialised once)");
    entries_.push_back({name, p, {total, p->shape.numel()}});
    total += p->shape.numel();
  }
  params_ = Tensor::empty(Shape{total}, DType::f32, MemCategory::parameters);
  params_.zero_();
  if (allocate_grads) {
    grads_ = Tensor::empty(Shape{total}, DType::f32, MemCategory::gradients);
    grads_.zero_();
  }
  for (auto& e : entries_) {
    Parameter* p = e.param;
    p->flat_offset = e.range.offset;
    Tensor value = params_.flat_range(e.range.offset, e.range.size).view(p->shape);
    p->var = Variable(value, p->requires_grad, e.name);
    if (allocate_grads && p->requires_grad) {
      p->var.set_grad(grads_.flat_range(e.range.offset, e.range.size).view(p->shape));
    }
  }
}

const FlatBuffer::Entry& FlatBuffer::entry(std::string_view name) const {
  for (const auto& e : entries_) {
    if (e.name == name) return e;
  }
  BRAID_THROW("FlatBuffer: no parameter named '", name, "' (", entries_.size(), " parameters)");
}

FlatRange FlatBuffer::range_of(const std::vector<Module*>& modules) const {
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0, count = 0;
  for (Module* m : modules) {
    for (auto& [name, p] : m->named_parameter_slots()) {
      bool mine = false;
      for (const auto& e : entries_) mine = mine || e.param == p;
      BRAID_CHECK(mine, "FlatBuffer::range_of: parameter '", name, "' is not in this flat buffer");
      lo = std::min(lo, p->flat_offset);
      hi = std::max(hi, p->flat_offset + p->shape.numel());
      count += p->shape.numel();
    }
  }
  if (count == 0) return {0, 0};
  BRAID_CHECK(hi - lo == count, "FlatBuffer::range_of: the modules' ", count,
              " parameter elements are not contiguous (they span [", lo, ", ", hi, "))");
  return {lo, hi - lo};
}

void FlatBuffer::zero_grad() {
  if (grads_.defined()) grads_.zero_();
}

void FlatBuffer::init(uint64_t seed) {
  Rng base(seed);
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    float* data = params_.data<float>() + e.range.offset;
    const ParamInit init = e.param->init;
    if (init.std > 0) {
      Rng rng = base.fork(i);
      for (int64_t j = 0; j < e.range.size; ++j) data[j] = init.std * rng.normal();
    } else {
      std::fill(data, data + e.range.size, init.value);
    }
  }
}

}  // namespace braid::nn
