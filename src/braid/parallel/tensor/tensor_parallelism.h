// TensorParallelism: Megatron-style tensor parallelism over the mesh's tp group, one part of the
// parallel runtime (Parallelism, parallelism.h) beside data parallelism, which it never wraps.
// The model is declared with this rank's slices (model_split(), Note [Tensor-parallel layout] in
// nn/tensor_parallel.h), so data parallelism over the dp group treats that local model as its
// model (every rank of a dp group holds the same slices). What tensor parallelism adds:
//   - materialisation fills each unit from its full values (initialisation or a checkpoint sees
//     one process's model) and keeps this rank's slices (slicing());
//   - the whole unit for export and comparison: the tp ranks' slices all-gathered and placed
//     (whole_unit());
//   - the time the model waited for tp collectives, for the step's statistics.
// The gradient norm counts replicated parameters once over the model-parallel group (Note
// [Model-parallel norm]); the tp ranks of a dp coordinate read the same batches.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "braid/nn/transformer.h"
#include "braid/parallel/tensor/tp_group.h"

namespace braid::parallel {

class TensorParallelism {
 public:
  TensorParallelism(std::shared_ptr<comm::ProcessGroup> tp, bool sequence_parallel);

  // What the model must be declared with (TransformerOptions::tensor_parallel).
  nn::TensorParallel* model_split() { return &group_; }
  TpGroup& group() { return group_; }
  std::string describe() const { return group_.describe(); }

  using Fill = std::function<void(int unit, Tensor& unit_params)>;
  // A fill of this rank's units from `fill`, which fills whole units (as one process would):
  // each unit is filled whole and this rank keeps its slices.
  Fill slicing(const nn::Transformer& model, Fill fill) const;
  // The whole unit of this rank's unit u (f32, full_layout()'s unit), from `local` (the unit as
  // this rank holds it): the tp ranks' slices gathered and placed. Collective over tp.
  Tensor whole_unit(const nn::Transformer& model, int u, const Tensor& local);

  void reset_stats() { group_.reset_stats(); }  // the step's tp traffic counts from its start
  double wait_ms() const { return group_.stats().wait_ms; }

 private:
  TpGroup group_;
};

}  // namespace braid::parallel
