#include "braid/parallel/estimate/pipeline_estimate.h"

#include <algorithm>

#include "braid/core/error.h"

namespace braid::parallel {

StageActivations stage_activations(const pipeline::ScheduleShape& shape, int stage,
                                   const std::vector<SpanActivations>& chunks, bool batches) {
  using Kind = pipeline::Action::Kind;
  BRAID_CHECK(static_cast<int>(chunks.size()) == shape.chunks, "estimate-memory: ", chunks.size(),
              " chunks for ", shape.chunks, " virtual stages per rank");
  const std::vector<pipeline::Action> actions = pipeline::stage_actions(shape, stage);
  const int V = shape.virtual_stages();
  auto vs = [&](const pipeline::Action& a) {
    return pipeline::virtual_stage(shape, stage, a.chunk);
  };
  // A message from this stage itself is handed over, not received into a buffer of its own.
  auto receives = [&](const pipeline::Action& a) {
    if (a.kind == Kind::weight) return false;
    const int from = a.kind == Kind::forward ? vs(a) - 1 : vs(a) + 1;
    if (from < 0 || from >= V || pipeline::stage_of(shape, from) == stage) return false;
    return a.kind == Kind::backward || a.micro > 0;
  };
  int64_t alive = 0, most = 0;  // bytes of the micro-batches held
  int leaves = 0, most_leaves = 0, all_leaves = 0;
  for (size_t i = 0; i < actions.size(); ++i) {
    const pipeline::Action& a = actions[i];
    const SpanActivations& c = chunks[static_cast<size_t>(a.chunk)];
    const int64_t posted = i + 1 < actions.size() && receives(actions[i + 1]) ? c.stream : 0;
    const bool leaf = vs(a) > 0;
    switch (a.kind) {
      case Kind::forward:
        alive += c.kept;
        most = std::max(most, alive + posted);
        if (leaf) {
          most_leaves = std::max(most_leaves, ++leaves);
          ++all_leaves;
        }
        break;
      case Kind::backward: {
        const bool split = pipeline::has_weight_passes(shape.kind);
        most = std::max(most, alive - c.kept + (split ? c.split_peak : c.peak) + posted);
        alive += (split ? c.weight_kept : 0) - c.kept;
        if (leaf) --leaves;
        break;
      }
      case Kind::weight:
        most = std::max(most, alive + posted);
        alive -= c.weight_kept;
        break;
    }
  }
  StageActivations out;
  const int64_t m = shape.micro_batches;
  out.activations = (batches ? m * chunks.front().batch : 0) + most;
  out.input_gradients = chunks.front().stream * std::min(most_leaves + 1, all_leaves);
  return out;
}

}  // namespace braid::parallel
