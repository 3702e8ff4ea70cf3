// FlatBuffer (docs/design.md "Flat buffers"): a whole model materialised in ONE contiguous f32
// buffer (MemCategory::parameters) laid out by a ParamLayout: units one after the other, each
// parameter a view at its offset. The gradient buffer mirrors the same layout
// (MemCategory::gradients) and each trainable parameter's grad is a view of it, so buckets,
// ZeRO partitions, fused optimizer steps and checkpoint shards are all `{offset, size}`
// ranges. Frozen parameters keep their range in both buffers (their gradient range stays
// zero) so offsets never depend on what is trainable. Padding stays zero.
//
// This is how the replicated strategies (one process, DDP, ZeRO-1/2) hold a model; ZeRO-3
// materialises unit by unit instead (parallel/zero).
//
// Note [Compute copy]: with a compute dtype other than f32 (mixed precision, docs/design.md
// "Precision") the buffer also holds a compute copy of the parameters in that dtype, in the same
// layout (MemCategory::parameters). The parameters' values are views of the compute copy, their
// gradients views of the f32 gradient buffer (kernels accumulate parameter gradients in f32);
// params() stays the f32 master copy the optimizer steps, and sync_compute() refreshes the
// compute copy from it after every change of the masters. Without masters (a ZeRO strategy that
// keeps only its own f32 pieces) params() is undefined and the compute copy is all there is.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "braid/core/rng.h"
#include "braid/core/tensor.h"
#include "braid/nn/module.h"
#include "braid/nn/param_layout.h"

namespace braid::nn {

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
    FlatRange range;  // in this buffer
  };

  FlatBuffer() = default;
  // Materialises every parameter of the layout (which must have no storage yet). Every buffer
  // is zeroed; the gradient buffer (when allocate_grads) is attached to trainable parameters.
  // compute: the parameters' dtype (Note [Compute copy]); masters: keep the f32 master buffer
  // (only meaningful with a compute dtype other than f32, which then needs it or a strategy's
  // own masters).
  explicit FlatBuffer(const ParamLayout& layout, bool allocate_grads = true,
                      DType compute = DType::f32, bool masters = true);

  bool defined() const { return compute_.defined(); }
  int64_t numel() const { return compute_.numel(); }
  Tensor& params() { return params_; }  // f32 masters (undefined without masters)
  const Tensor& params() const { return params_; }
  // What the parameters are views of: params() itself when the compute dtype is f32.
  Tensor& compute() { return compute_; }
  const Tensor& compute() const { return compute_; }
  DType compute_dtype() const { return compute_.dtype(); }
  // Casts the masters into the compute copy (nothing when they are one buffer).
  void sync_compute();
  Tensor& grads() { return grads_; }  // undefined without allocate_grads
  const Tensor& grads() const { return grads_; }
  const std::vector<Entry>& entries() const { return entries_; }
  const Entry& entry(std::string_view name) const;  // throws naming the parameter
  const ParamLayout& layout() const { return layout_; }
  // Unit u's range of both buffers (padded).
  FlatRange unit_range(int u) const { return layout_.units().at(static_cast<size_t>(u)).range(); }

  void zero_grad();
  // Deterministic initialisation from `seed`, unit by unit (ParamLayout::init_unit): the same
  // values whatever the layout or padding.
  void init(uint64_t seed);

 private:
  ParamLayout layout_;
  Tensor params_;
  Tensor compute_;
  Tensor grads_;
  std::vector<Entry> entries_;
};

}  // namespace braid::nn
