// StagedModel: a Model that is a sequence, so a pipeline can split it (parallel/pipeline/): a
// first part that takes the inputs, num_layers() layers that each take the activation before,
// and a last part that turns the activation and the targets into the loss. Its units are, in
// order, the first part's, one per layer, and the last part's (declare_units). The Transformer
// is one (embeddings, blocks, final norm and LM head); a user's model is another (examples/mlp).
//
// Note [Pipeline stage]: a pipeline splits a model declared whole (torchtitan's pipeline split):
// keep_stage() leaves layout() holding only this rank's units — the layers of its chunks, the
// first part on the first stage, the last part on the last — while names, parameter indices and
// full_layout() stay those of one process. When the last part reads a parameter of the first
// (tied embeddings), the last stage also holds a replica of the first unit for it (as Megatron's
// embedding group does): the pipeline sums that parameter's gradient over the first and last
// stage (tied_parameters()), so both copies take the same steps; the replica is neither counted
// in the global norm nor saved (Note [Placements]), and what of it the last part does not read
// is frozen (freeze_replica_extras()).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "braid/autograd/variable.h"
#include "braid/nn/model.h"

namespace braid::nn {

using autograd::Variable;

struct PipelineStage {
  std::vector<std::pair<int64_t, int64_t>> chunks;  // layer ranges [begin, end), increasing
  bool first = false;  // holds the first part (the first virtual stage is here)
  bool last = false;   // holds the last part (the last virtual stage)
};

class StagedModel : public Model {
 public:
  virtual int64_t num_layers() const = 0;
  // Every pipeline stage calls it once per micro-batch before its other pieces (checks, and
  // what tensor parallelism needs to know of the batch).
  virtual void begin_forward(const Tensor& /*inputs*/) {}
  // The first part: inputs -> the activation the first layer takes.
  virtual Variable embed(const Tensor& inputs) = 0;
  // Layers [begin, end) on x.
  virtual Variable run_layers(Variable x, int64_t begin, int64_t end) = 0;
  // The last part: the summed loss of the activation against targets, divided by denominator.
  virtual Variable head_loss(const Variable& x, const Tensor& targets, double denominator) = 0;
  // The whole forward: begin_forward, embed, every layer, head_loss.
  virtual Variable loss(const Tensor& inputs, const Tensor& targets, double denominator);
  // Packed rows (Note [Packed rows], sequence_layout.h): the positions [B, T] of the micro-batch
  // whose forward and backward come next; undefined: plain rows. Models that cannot pack throw.
  virtual void set_packed_positions(const Tensor& positions);
  // Names of the first part's parameters the last part also reads (tied embeddings). The last
  // part reads them inside the forward of the module that borrows them (its UnitDecl borrower),
  // so data parallelism's hooks hold them, and their gradients, around every use.
  virtual std::vector<std::string> tied_parameters() const { return {}; }
  // The size of an activation's last dimension, when the model knows it (a pipeline checks
  // what it receives against it).
  virtual std::optional<int64_t> activation_width() const { return std::nullopt; }

  // Note [Pipeline stage]. Once, on a model declared whole, before it is materialised.
  void keep_stage(const PipelineStage& stage);
  const std::optional<PipelineStage>& pipeline_stage() const { return stage_; }
  bool holds_first() const { return !stage_ || stage_->first; }
  bool holds_last() const { return !stage_ || stage_->last; }
  const ParamLayout& full_layout() const override { return whole_ ? *whole_ : layout(); }
  int global_unit(int u) const override { return global_units_.empty() ? u : global_units_.at(u); }

 protected:
  // The replica of the first unit on a last stage that is not also the first: freeze what of it
  // the last part does not read (a Transformer's position table).
  virtual void freeze_replica_extras() {}

 private:
  std::optional<PipelineStage> stage_;
  std::optional<ParamLayout> whole_;  // the layout before keep_stage
  std::vector<int> global_units_;     // layout() unit -> full_layout() unit
};

// Sets a micro-batch's packed-row positions on a model for the scope (its forward and its
// backward, where checkpointed blocks rerun their forward: Note [Packed rows]) and clears them
// after; undefined positions leave the model as it is.
class PackedRowsScope {
 public:
  PackedRowsScope(StagedModel& model, const Tensor& positions)
      : model_(positions.defined() ? &model : nullptr) {
    if (model_) model_->set_packed_positions(positions);
  }
  ~PackedRowsScope() {
    if (model_) model_->set_packed_positions(Tensor());
  }
  PackedRowsScope(const PackedRowsScope&) = delete;
  PackedRowsScope& operator=(const PackedRowsScope&) = delete;

 private:
  StagedModel* model_;
};

}  // namespace braid::nn
