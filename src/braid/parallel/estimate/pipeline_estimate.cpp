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
  const int p = shape.stages, V = shape.virtual_stages();
  auto vs = [&](const pipeline::Action& a) { return a.chunk * p + stage; };
  auto receives = [&](const pipeline::Action& a) {
    if (a.kind == Kind::weight) return false;
    return a.kind == Kind::forward ? vs(a) > 0 && a.micro > 0 : vs(a) < V - 1;
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
