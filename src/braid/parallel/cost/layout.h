// Layout: one way to train a model on a world of ranks, as the planner (planner.h) enumerates
// and names it: the data-parallel strategy, tp with or without sequence parallelism, pp with its
// schedule, cp with its attention (ring or ulysses), micro-batch and accumulation, precision,
// checkpointing and offload. Its name
// round-trips through parse(), and it maps onto the config's keys and the ParallelPlan
// parallelize() applies. The step-time model (step_cost.h) prices it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "braid/core/dtype.h"
#include "braid/parallel/plan.h"

namespace braid::parallel::cost {

// One candidate layout: everything the planner chooses.
struct Layout {
  std::string strategy = "ddp";  // none | ddp | zero1 | zero2 | zero3 | hsdp
  int shard_group = 0;           // hsdp: ranks per shard group (FSDP HYBRID_SHARD's node)
  int tp = 1, pp = 1;
  bool sp = false;                     // sequence parallelism (tp > 1)
  int cp = 1;                          // context parallelism: ranks each sequence is split over
  std::string cp_mode = "ring";        // ring | ulysses (cp > 1)
  std::string schedule = "1f1b";       // gpipe | 1f1b | interleaved_1f1b | zb_h1 | zb_v (pp > 1)
  int virtual_stages = 1;              // chunks per rank: interleaved_1f1b's v, zb_v's 2
  bool balanced = false;               // layers split unevenly (pipeline_balance: parameters)
  int64_t micro_batch = 1;             // sequences per rank per micro-step
  int64_t accumulation = 1;            // micro-batches per step
  DType compute = DType::f32;          // f32 | bf16
  std::string checkpointing = "none";  // none | full | selective
  bool offload = false;                // optimizer state (and zero3 parameters) to files

  // "zero3 tp2 pp2:1f1b cp2:ring mb2x4 bf16 ckpt:full offload" (parts at their defaults left
  // out);
  // parse() reads it back and throws naming the part it does not know.
  std::string name() const;
  static Layout parse(const std::string& text);
  // The config's values for this layout, as `--set key=value` pairs for `braid train`.
  std::vector<std::pair<std::string, std::string>> config_values() const;
  // The plan parallelize() applies (seq_len for the pipeline's balance).
  ParallelPlan to_plan(int64_t seq_len) const;
};

}  // namespace braid::parallel::cost
