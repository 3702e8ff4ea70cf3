// The planner behind `braid plan` and `parallel.strategy: auto`: every layout of a model on a
// world of ranks (data-parallel strategy, tp with or without sequence parallelism, pp and its
// schedule, micro-batch and accumulation, precision, activation checkpointing, offload), those
// that do not fit the memory budget dropped (the estimator, estimate/memory_estimate.h), the
// rest ranked by predicted step time (step_cost.h).
//
// Note [Plan ranking]: layouts are ordered by predicted step time, except that the first choice
// is the simplest layout within 1% of the fastest (fewer parallel dimensions, then no offload,
// then no checkpointing, then less sharding, then larger micro-batches), so a layout is never
// chosen for a gain the model cannot resolve. The global batch is fixed: each layout's
// data-parallel ranks dp split it into micro-batches of b sequences, accumulation = global / (dp
// b); dp must divide it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "braid/parallel/cost/step_cost.h"
#include "braid/parallel/estimate/memory_estimate.h"

namespace braid::parallel::cost {

struct PlanRequest {
  nn::ModelConfig model;
  int world = 1;
  int hosts = 1;
  int64_t seq_len = 1024;
  int64_t global_batch = 8;  // sequences per optimizer step
  int64_t budget = 0;        // bytes per rank (0: the profile's memory per rank)
  std::vector<DType> precisions = {DType::f32, DType::bf16};
  std::vector<std::string> checkpointing = {"none", "selective", "full"};
  bool offload = true;           // consider offloading to files
  int64_t max_micro_batch = 0;   // 0: no limit
  int max_context_parallel = 0;  // the largest cp tried, within a node; 0: a node's ranks
};

struct Candidate {
  Layout layout;
  StepCost cost;
  MemoryEstimate memory;
  bool fits = true;
};

struct PlanResult {
  std::vector<Candidate> ranked;   // fitting layouts, fastest first (Note [Plan ranking])
  std::vector<Candidate> too_big;  // the rest, smallest memory first
  int64_t budget = 0;              // the budget used
  // The layouts predicted (offload ones are left out where the profile has no disk).
  size_t considered() const { return ranked.size() + too_big.size(); }
};

// Throws naming the request's field when nothing can be enumerated (world < 1, a global batch
// no layout divides, ...).
PlanResult plan_layouts(const PlanRequest& request, const MachineProfile& profile);

// Every layout of the request, valid for the model and the world, before memory and ranking.
std::vector<Layout> enumerate_layouts(const PlanRequest& request);

// The memory estimate of one layout: the estimator's for its plan (memory_estimate.h), the
// layout's largest pipeline stage.
MemoryEstimate layout_memory(const PlanRequest& request, const Layout& layout);

// The memory budget a plan holds its layouts to: the request's, else the profile's per rank.
int64_t plan_budget(const PlanRequest& request, const MachineProfile& profile);

// One layout's predicted step and memory against `budget` (what the planner ranks, what
// --explain prints).
Candidate evaluate_layout(const PlanRequest& request, const Layout& layout,
                          const MachineProfile& profile, int64_t budget);

// Why the first choice: its lead over the next layouts and over the plain data-parallel ones,
// and what does not fit.
std::string explain_choice(const PlanResult& result);

}  // namespace braid::parallel::cost
