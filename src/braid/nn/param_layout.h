// ParamLayout (docs/design.md "Declare, then materialise"): where every declared parameter of a
// model lives, computed from the module tree without allocating anything.
//
// Parameters are grouped into units (the FSDP/ZeRO-3 granularity: for a Transformer the
// embeddings, each block, and the head). A unit's parameters are contiguous in declaration
// order (= first use in forward) at fixed offsets inside the unit; the unit's elements are
// padded to a multiple of `pad_multiple` (so a sharded strategy can split every unit into equal
// shards). In a full flat buffer the units follow each other, each starting at a multiple of
// kAlign elements (64 bytes), so every parameter has the same alignment in a full buffer as in
// a buffer holding its unit alone: kernels see the same addresses mod 64 whatever the layout.
//
// Each unit also names its users: the modules whose forward or backward reads its parameters.
// They are its owners plus, for tied weights, the module that borrows them (the LM head reads
// the token embedding); a strategy gathers a unit on its users' hooks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "braid/core/rng.h"
#include "braid/core/shard_record.h"
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

struct UnitDecl {
  std::string name;
  std::vector<Module*> owners;          // their parameters (whole subtrees) make up the unit
  std::vector<Module*> borrowers = {};  // other modules that read the unit's parameters
};

struct ParamInfo {
  std::string name;  // full dotted name
  Parameter* param;
  int index;            // position in declaration order: the init stream (Rng::fork(index))
  int unit;             // index into ParamLayout::units()
  int64_t unit_offset;  // element offset inside the unit
  int64_t numel;
  // This rank's whole parameter: its tp slice of the full tensor (Note [Placements]).
  ShardRecord whole() const { return {name, param->full_shape, param->tp, 0, numel, DType::f32}; }
};

struct UnitInfo {
  std::string name;
  std::vector<Module*> owners;
  std::vector<Module*> users;  // owners, then borrowers
  std::vector<int> params;     // indices into ParamLayout::params(), in order
  int64_t numel = 0;           // elements used by parameters
  int64_t padded = 0;          // numel rounded up to pad_multiple
  int64_t offset = 0;          // start in a full flat buffer (a multiple of kAlign)
  FlatRange range() const { return {offset, padded}; }
};

class ParamLayout {
 public:
  static constexpr int64_t kAlign = 16;  // elements (64 bytes of f32)

  ParamLayout() = default;
  // Every parameter of `root` must belong to exactly one unit, and the units' parameters must
  // follow each other in declaration order. pad_multiple must be a positive multiple of kAlign.
  // With `subset`, parameters of root that belong to no unit are left out (a pipeline stage holds
  // some units of a model declared whole); ParamInfo::index still counts them, so it is the
  // parameter's position in the whole model.
  ParamLayout(Module& root, const std::vector<UnitDecl>& units, int64_t pad_multiple = kAlign,
              bool subset = false);

  const std::vector<ParamInfo>& params() const { return params_; }
  const std::vector<UnitInfo>& units() const { return units_; }
  int64_t pad_multiple() const { return pad_multiple_; }
  int64_t total() const { return total_; }  // elements of a full flat buffer (with padding)
  int64_t num_parameters() const;           // elements used by parameters (no padding)
  const ParamInfo& param(std::string_view name) const;  // throws naming the parameter
  int64_t flat_offset(const ParamInfo& p) const { return units_[p.unit].offset + p.unit_offset; }

  // The same declaration with another padding (a sharded strategy pads to world x kAlign).
  ParamLayout with_padding(int64_t pad_multiple) const;

  // Fills unit u's parameters in `unit_params` (f32, >= units()[u].numel elements, a buffer
  // holding the unit alone) GPT-2 style from `seed`: parameter i from its own stream
  // Rng(seed).fork(i), normal(0, std) or a constant (ParamInit). The values do not depend on
  // the layout, the padding or which other units a rank holds. Padding is left untouched.
  void init_unit(int u, Tensor& unit_params, uint64_t seed) const;
  // Elements [begin, end) of unit u into `part` (f32, end - begin elements: the range alone),
  // the values init_unit gives them, padding zero: a rank that keeps or initialises part of a
  // unit draws that part alone (Note [Ranged loads]), each stream advanced to the range's first
  // element.
  void init_unit_range(int u, int64_t begin, int64_t end, Tensor part, uint64_t seed) const;
  // Unit u's elements [begin, end) in order, as runs: fn(&p, a, b) for elements [a, b) of the
  // unit that are parameter p's, fn(nullptr, a, b) for padding between and after them.
  void for_each_part(int u, int64_t begin, int64_t end,
                     const std::function<void(const ParamInfo*, int64_t, int64_t)>& fn) const;

  // Points each parameter of unit u at its slice of `unit_params` (a buffer holding the unit
  // alone), creating the parameter's Variable on first use; with `unit_grads` defined, trainable
  // parameters get their gradient views too (else their gradient is left undefined).
  void bind_unit(int u, const Tensor& unit_params, const Tensor& unit_grads) const;
  // Drops unit u's parameter values and gradients (the Variables stay, with undefined values).
  void unbind_unit(int u) const;
  // Unit u's parameters as Variables with no value (created where missing, else unbound): a
  // runtime that keeps the unit in pieces binds it when it gathers it.
  void declare_unit(int u) const;

 private:
  std::vector<ParamInfo> params_;
  std::vector<UnitInfo> units_;
  int64_t pad_multiple_ = kAlign;
  int64_t total_ = 0;
};

}  // namespace braid::nn
