// parallel.strategy: auto (`braid train --plan`): the planner's first choice
// (parallel/cost/planner.h) for the config's model, sequence, global batch and precision on the
// launched ranks, from this machine's profile (`braid plan --calibrate`), written into the
// config's parallel and batch keys before anything else reads them.
//
// Note [Auto plan]: the planner chooses the data-parallel strategy, tp (with or without sequence
// parallelism), pp and its schedule, the micro-batch and accumulation, activation checkpointing
// and offload; the precision stays the config's (fp32 or bf16: a plan does not change the
// numbers a run computes in), and so does the global batch (training.global_batch_size, which
// auto needs). The memory budget is memory.budget, else the profile's. Every rank reads its own
// host's profile and chooses alike; ranks whose choices differ fail the start-up config
// agreement (config/config_agreement.h) naming the keys.
#pragma once

#include <string>

#include "braid/config/config.h"

namespace braid::train {

// Resolves parallel.strategy: auto in place for `world_size` ranks, `hosts` nodes, and returns
// the line saying what was chosen and why ("" when the strategy is not auto). Throws naming the
// key when auto cannot plan (no profile, no global batch, fp16, nothing fits).
std::string resolve_auto_plan(config::TrainConfig& cfg, int world_size, int hosts);

// The line resolve_auto_plan() said, from the description of a loaded run config
// (load_run_config's mapping, where it is a "# " comment line); "" when there is none.
std::string auto_plan_line(const std::string& described);

}  // namespace braid::train
