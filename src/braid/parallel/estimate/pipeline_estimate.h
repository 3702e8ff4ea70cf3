// A pipeline stage's activations over its schedule: which micro-batches of which of its chunks
// are alive at each moment, from the schedule's own action lists (parallel/pipeline/schedule.h).
//
// Note [Pipeline activations]: the rank runs its actions in order (stage_actions); a forward
// (micro m, chunk c) keeps what span_activations says one micro-batch of c's span keeps until its
// backward (gpipe: every micro-batch's; 1f1b: at most p - stage; interleaved: the warm-up's
// 2 (p - stage - 1) + (v - 1) p forwards over the chunks, then one in, one out); a backward
// peaks at its span's peak over everything else alive. Under a schedule with weight passes
// (zb_h1) the backward is B: it peaks at its split peak and leaves what the weight pass reads
// (Note [Weight pass]) until its W, which the schedule places up to `stage` backwards later.
// While an action runs, the receive for the next one is posted (stage_runner.cpp): a residual
// stream's buffer when that action takes a message (not the first activations of a step, which
// wait for their header). The batches' ids and targets stay for the whole step on the first and
// the last stage. The gradients of received activations (leaves, in the gradients category)
// live from their forward to their backward, one more while it is sent back.
#pragma once

#include <cstdint>
#include <vector>

#include "braid/parallel/estimate/activation_estimate.h"
#include "braid/parallel/pipeline/schedule.h"

namespace braid::parallel {

struct StageActivations {
  int64_t activations = 0;      // the activations category's peak
  int64_t input_gradients = 0;  // bytes of received activations' gradients at most
};

// chunks[c]: one micro-batch of this rank's chunk c (virtual stage c x p + stage); `batches`:
// whether the rank keeps the step's ids and targets (the first or the last stage).
StageActivations stage_activations(const pipeline::ScheduleShape& shape, int stage,
                                   const std::vector<SpanActivations>& chunks, bool batches);

}  // namespace braid::parallel
