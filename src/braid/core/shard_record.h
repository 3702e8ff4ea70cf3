// ShardRecord (docs/design.md "Shard record"): which part of a named tensor a rank holds. A flat
// shard is the element range [offset, offset + numel) of the tensor's row-major elements; the
// tensor's full shape says how to read it. The optimizer's slices, the HF exporter and (later)
// the checkpoint manifest all describe what a rank holds with this one record, which is what
// lets any layout read any other.
#pragma once

#include <cstdint>
#include <string>

#include "braid/core/dtype.h"
#include "braid/core/shape.h"

namespace braid {

struct ShardRecord {
  std::string name;    // the full tensor's name ("transformer.h.0.attn.c_attn.weight")
  Shape global_shape;  // the full tensor's shape
  int64_t offset = 0;  // first element held, in the full tensor's row-major order
  int64_t numel = 0;   // elements held
  DType dtype = DType::f32;

  bool is_whole() const { return offset == 0 && numel == global_shape.numel(); }
  int64_t end() const { return offset + numel; }
};

}  // namespace braid
