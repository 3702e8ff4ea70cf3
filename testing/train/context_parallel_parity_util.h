// Shared by the context-parallel parity tests (thread-backed ranks and real processes under
// mpirun): a layout with cp (and dp, tp, pp beside it) of the tiny training config, and the one
// process that reads the same global batches.
#pragma once

#include <string>

#include "testing/train/ddp_parity_util.h"

namespace braid::train {

struct CpLayout {
  std::string name;
  int world;
  std::string preset = "gpt2-tiny";
  int cp = 2;
  std::string mode = "ring";
  std::string strategy = "none";
  std::string sharding = "FULL_SHARD";
  int tp = 1;
  bool sp = false;
  int pp = 1;
  int dp() const { return world / (cp * tp * pp); }
};

// 3 steps of 2 micro-batches of 2 sequences of 16 tokens, clipping on.
inline config::TrainConfig cp_parity_config(const CpLayout& l) {
  config::TrainConfig c = tiny(2, 2, l.strategy);
  c.model.preset = l.preset;
  c.training.max_steps = 3;
  c.parallel.context_parallel_size = l.cp;
  c.parallel.context_parallel_mode = l.mode;
  c.parallel.sharding_strategy = l.sharding;
  c.parallel.tensor_parallel_size = l.tp;
  c.parallel.sequence_parallel = l.sp;
  c.parallel.pipeline_parallel_size = l.pp;
  return c;
}

// One process reading what the layout's dp batch shares read.
inline config::TrainConfig cp_reference_config(const CpLayout& l) {
  config::TrainConfig c = tiny(2 * l.dp(), 2, "none");
  c.model.preset = l.preset;
  c.training.max_steps = 3;
  return c;
}

}  // namespace braid::train
