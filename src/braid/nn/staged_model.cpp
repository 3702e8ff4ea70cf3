#include "braid/nn/staged_model.h"

#include "braid/core/error.h"

namespace braid::nn {

void StagedModel::set_packed_positions(const Tensor& positions) {
  BRAID_CHECK(!positions.defined(),
              "this model does not take packed rows (several examples a "
              "row): prepare the data with --layout pad");
}

Variable StagedModel::loss(const Tensor& inputs, const Tensor& targets, double denominator) {
  begin_forward(inputs);
  return head_loss(run_layers(embed(inputs), 0, num_layers()), targets, denominator);
}

void StagedModel::keep_stage(const PipelineStage& stage) {
  BRAID_CHECK(!stage_, "StagedModel: keep_stage() called twice");
  BRAID_CHECK(!is_materialized(), "StagedModel: keep_stage() on a materialised model");
  const ParamLayout& whole = layout();
  const int64_t L = num_layers();
  BRAID_CHECK(static_cast<int64_t>(whole.units().size()) == L + 2,
              "a pipeline splits a model "
              "declared as its first part, one unit per layer and its last part (",
              L + 2, " units for ", L, " layers); this one declares ", whole.units().size());
  BRAID_CHECK(!stage.chunks.empty(), "StagedModel: a pipeline stage needs at least one chunk");
  std::vector<UnitDecl> decls;
  for (const UnitInfo& u : whole.units()) {
    UnitDecl d{u.name, u.owners, {}};
    d.borrowers.assign(u.users.begin() + static_cast<std::ptrdiff_t>(u.owners.size()),
                       u.users.end());
    decls.push_back(std::move(d));
  }
  std::vector<UnitDecl> mine;
  std::vector<int> globals;
  // The last part reads the first unit's parameters (a tied head): the last stage keeps a
  // replica of it (Note [Pipeline stage]).
  const UnitInfo& first = whole.units().front();
  const bool replica = stage.last && !stage.first && first.users.size() > first.owners.size();
  if (stage.first || replica) {
    mine.push_back(decls.front());
    globals.push_back(0);
  }
  int64_t next = 0;
  for (const auto& [begin, end] : stage.chunks) {
    BRAID_CHECK(begin >= next && begin < end && end <= L, "StagedModel: pipeline chunk [", begin,
                ", ", end, ") is empty, out of order or beyond the ", L, " layers");
    for (int64_t i = begin; i < end; ++i) {
      mine.push_back(decls[static_cast<size_t>(1 + i)]);
      globals.push_back(static_cast<int>(1 + i));
    }
    next = end;
  }
  if (stage.last) {
    mine.push_back(decls.back());
    globals.push_back(static_cast<int>(decls.size()) - 1);
  }
  whole_ = whole;
  stage_ = stage;
  global_units_ = std::move(globals);
  set_layout(ParamLayout(*this, mine, ParamLayout::kAlign, /*subset=*/true));
  if (!replica) return;
  for (int p : layout().units().front().params)
    layout().params()[static_cast<size_t>(p)].param->tp.counts_in_norm = false;
  freeze_replica_extras();
}

}  // namespace braid::nn
