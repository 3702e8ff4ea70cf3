// FlatBuffer (DESIGN.md "Flat buffers"): every parameter of a module tree lives in ONE
// contiguous f32 buffer (MemCategory::parameters), in declaration order (= first use in
// forward); each parameter's Variable is a view of it. The gradient buffer mirrors the same
// layout (MemCategory::gradients) and each trainable parameter's grad is a view of it, so
// buckets, ZeRO partitions, fused optimizer steps and checkpoint shards are all `{offset,
// size}` ranges. Frozen parameters keep their range in both buffers (their gradient range
// stays zero) so offsets never depend on what is trainable.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "braid/core/rng.h"
#include "braid/core/tensor.h"
#include "braid/nn/module.h"

namespace braid::nn {

// A half-open element range [offset, offset + size) of a flat buffer.
struct FlatRange {
  int64_t offset = 0;
  int64_t size = 0;
  int64_t end() const { return offset + size; }
  bool operator==(const FlatRange&) const = default;
};

// One rank's shard of a range split over N ranks: every rank owns `padded_size` elements
// (= ceil(range.size / N)); the real elements are [offset, offset + size) of the flat buffer
// (size < padded_size on the last ranks, possibly 0), the rest is padding.
struct ShardRange {
  int64_t offset = 0;
  int64_t size = 0;
  int64_t padded_size = 0;
  bool operator==(const ShardRange&) const = default;
};
std::vector<ShardRange> padded_shards(FlatRange range, int world_size);

class FlatBuffer {
 public:
  struct Entry {
    std::string name;  // full dotted name
    Parameter* param;
    FlatRange range;
  };

  FlatBuffer() = default;
  // Materialises every parameter of `root` (which must have no storage yet). The parameter
  // buffer is zeroed; the gradient buffer (when allocate_grads) is zeroed and attached.
  explicit FlatBuffer(Module& root, bool allocate_grads = true);

  int64_t numel() const { return params_.numel(); }
  Tensor& params() { return params_; }
  const Tensor& params() const { return params_; }
  Tensor& grads() { return grads_; }  // undefined without allocate_grads
  const Tensor& grads() const { return grads_; }
  const std::vector<Entry>& entries() const { return entries_; }
  const Entry& entry(std::string_view name) const;  // throws naming the parameter

  // The contiguous range holding all parameters of `modules` (throws when they are not
  // contiguous in the layout or were not materialised by this buffer).
  FlatRange range_of(const std::vector<Module*>& modules) const;

  void zero_grad();
  // GPT-2-style deterministic initialisation from `seed`: each parameter is filled from its
  // own stream rng.fork(index) following its ParamInit, so the result does not depend on
  // threads or on which other parameters exist before it.
  void init(uint64_t seed);

 private:
  Tensor params_;
  Tensor grads_;
  std::vector<Entry> entries_;
};

}  // namespace braid::nn
