// Model: a module tree that a strategy (parallel/) can hold. Besides its modules it declares
// its units (ParamLayout, param_layout.h: the FSDP/ZeRO granularity) and owns the one FlatBuffer
// a replicating strategy materialises it into. The Transformer is one; a user's own model (the
// Accelerator's, train/accelerator.h) is another: it declares its modules and parameters, then
// calls declare_units() once, and is materialised by whichever strategy prepares it.
#pragma once

#include <cstdint>
#include <vector>

#include "braid/core/dtype.h"
#include "braid/nn/flat_buffer.h"
#include "braid/nn/module.h"
#include "braid/nn/param_layout.h"

namespace braid::nn {

class Model : public Module {
 public:
  // Where every parameter this rank holds lives, units padded to ParamLayout::kAlign.
  const ParamLayout& layout() const { return layout_; }
  // The same units with their full shapes (one process's layout: what export, import and
  // initialisation see); layout() itself unless the model is split across ranks.
  virtual const ParamLayout& full_layout() const { return layout_; }
  // The index in full_layout() of this rank's unit u (layout().units()[u]).
  virtual int global_unit(int u) const { return u; }

  // Materialises the whole model in one FlatBuffer whose units are padded to pad_multiple, with
  // parameters in `compute` (Note [Compute copy], flat_buffer.h; masters: keep f32 masters).
  void materialize(bool allocate_grads, int64_t pad_multiple = ParamLayout::kAlign,
                   DType compute = DType::f32, bool masters = true);
  bool is_materialized() const { return flat_.defined(); }
  // The whole model's buffer; throws when the model is not materialised in one buffer.
  FlatBuffer& flat();
  const FlatBuffer& flat() const;
  void init_weights(uint64_t seed) { flat().init(seed); }
  void zero_grad() { flat().zero_grad(); }

 protected:
  // Groups the declared parameters into units (each parameter in exactly one; units follow
  // declaration order): call once, after every module and parameter is declared. One unit
  // holding everything is DDP's granularity; one per layer lets ZeRO-3 gather layer by layer.
  void declare_units(const std::vector<UnitDecl>& units) { layout_ = ParamLayout(*this, units); }
  void set_layout(ParamLayout layout) { layout_ = std::move(layout); }

 private:
  ParamLayout layout_;
  FlatBuffer flat_;
};

}  // namespace braid::nn
