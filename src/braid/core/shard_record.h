// ShardRecord (docs/design.md "Shard record"): which part of a named tensor a rank holds,
// described once and read by the optimizer's slices, the checkpoint manifest and the exporter,
// which is what lets any layout read any other.
//
// Note [Placements]: a rank's part of a tensor, one placement per mesh dimension that cuts it,
// as DTensor's placements (and DCP's metadata) say it:
//   tp  Shard(dim): the tensor-parallel slice (TpSlice: dim `dim` of the whole tensor, padded to
//       `padded`, is `sections` equal sections each cut into `parts` equal parts, and the rank
//       holds part `part` of every section; Note [Tensor-parallel layout], nn/tensor_parallel.h),
//       or Replicate (parts 1, no padding: the whole tensor);
//   dp  a flat range [offset, offset + numel) of that slice's row-major elements (ZeRO/FSDP's
//       flat shard), or Replicate (DDP: the whole slice);
//   pp  the stage that declares the tensor holds it whole (a pipeline's tied-embedding replica
//       on the last stage is a copy: counts_in_norm false).
// A copy whose elements another rank also holds as the counted one (a replicated parameter on tp
// ranks past the first, the pipeline's replica) has counts_in_norm false: it is neither counted
// in the global norm nor saved.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "braid/core/dtype.h"
#include "braid/core/error.h"
#include "braid/core/shape.h"

namespace braid {

struct TpSlice {
  int dim = 0;
  int64_t sections = 1;
  int parts = 1;
  int part = 0;
  int64_t padded = 0;  // 0: no padding (the whole size along dim)
  // Whether this rank's copy is the one counted in the global gradient norm and saved: one rank
  // of those holding the same part (Note [Model-parallel norm], parallel/model_parallel_norm.h).
  bool counts_in_norm = true;

  bool is_split() const { return parts > 1 || padded > 0; }
  // The same slice of the same whole (counts_in_norm aside).
  bool same_cut(const TpSlice& o) const {
    return dim == o.dim && sections == o.sections && parts == o.parts && part == o.part &&
           padded == o.padded;
  }
  // The shape this slice of `whole` has.
  Shape local_shape(const Shape& whole) const;
  std::string str() const;  // "shard(dim=0, sections=3, part 1 of 2)" or "replicate"
};

// Walks the elements [begin, end) of a slice of `whole` (its row-major local order) in maximal
// runs that are contiguous in both: fn(local offset, whole offset or -1 for padding, length).
template <typename Fn>
void for_each_run(const Shape& whole, const TpSlice& s, int64_t begin, int64_t end, Fn fn) {
  if (!s.is_split()) {
    if (end > begin) fn(begin, begin, end - begin);
    return;
  }
  BRAID_CHECK(s.dim >= 0 && s.dim < whole.dim(), "tensor slice: dim ", s.dim, " of ", whole.str());
  const int d = s.dim;
  const int64_t real = whole[d];
  const int64_t padded = s.padded > 0 ? s.padded : real;
  BRAID_CHECK(padded % (s.sections * s.parts) == 0 && real <= padded, "tensor slice: dim ", d,
              " of ", whole.str(), " (padded ", padded, ") does not split into ", s.sections,
              " sections of ", s.parts, " parts");
  int64_t inner = 1;
  for (int i = d + 1; i < whole.dim(); ++i) inner *= whole[i];
  const int64_t rows = padded / s.parts;  // the local size along dim
  const int64_t section = padded / s.sections, part = rows / s.sections;
  int64_t run_local = begin, run_whole = 0, run_n = 0;  // the run being extended
  for (int64_t at = begin; at < end;) {
    const int64_t row = at / inner, within = at % inner;  // row: (outer, j) flattened
    const int64_t o = row / rows, j = row % rows;
    const int64_t g = (j / part) * section + s.part * part + j % part;
    const int64_t n = std::min(end - at, inner - within);
    const int64_t w = g < real ? (o * real + g) * inner + within : -1;
    const bool extends = run_n > 0 && ((w < 0 && run_whole < 0) ||
                                       (w >= 0 && run_whole >= 0 && w == run_whole + run_n));
    if (extends) {
      run_n += n;
    } else {
      if (run_n > 0) fn(run_local, run_whole, run_n);
      run_local = at;
      run_whole = w;
      run_n = n;
    }
    at += n;
  }
  if (run_n > 0) fn(run_local, run_whole, run_n);
}

struct ShardRecord {
  std::string name;    // the whole tensor's name ("transformer.h.0.attn.c_attn.weight")
  Shape global_shape;  // the whole tensor's shape
  TpSlice tp;          // tp placement: which slice of it this rank's tensor is
  int64_t offset = 0;  // dp placement: first element held, in the slice's row-major order
  int64_t numel = 0;   // elements held
  DType dtype = DType::f32;

  Shape local_shape() const { return tp.local_shape(global_shape); }
  bool is_whole() const { return !tp.is_split() && offset == 0 && numel == global_shape.numel(); }
  int64_t end() const { return offset + numel; }
};

}  // namespace braid
