// The tensor-parallel communication benchmark behind `braid bench tp`: one tp group over the
// whole world trains a model for a few micro-steps and reports, per micro-step, the collectives
// the model issued on the tp group and their bytes, beside what Megatron-LM's analysis says a
// tensor-parallel transformer moves (Note [Megatron formula], tp_bench.cpp), and the time the
// compute thread waited for them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "braid/comm/process_group.h"

namespace braid::bench {

struct TpBenchOptions {
  std::string preset = "bench-small";
  int64_t batch = 4;
  int64_t seq_len = 256;
  bool sequence_parallel = false;
  int steps = 3;  // timed micro-steps, after one warm-up
};

// Collective over `world` (all of it is the tp group); rank 0 prints to `out`. Returns false
// when the measured collectives or bytes differ from the formula.
bool run_tp_bench(std::shared_ptr<comm::ProcessGroup> world, const TpBenchOptions& options,
                  FILE* out);

}  // namespace braid::bench
