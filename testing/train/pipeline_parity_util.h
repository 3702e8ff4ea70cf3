// Shared by the pipeline parity tests (thread-backed ranks and real processes under mpirun):
// a run with pipeline parallelism (optionally with data and tensor parallelism: the 3-D mix) of
// an 8-layer variant of a tiny preset, and the one process that reads the same global batches.
#pragma once

#include <filesystem>
#include <string>

#include "testing/private_temp_dir.h"
#include "testing/train/ddp_parity_util.h"

namespace braid::train {

// An 8-layer `preset` (pp 4 x v 2 needs a block per virtual stage), written once as config.json.
inline std::string deep_tiny_config(const std::string& preset) {
  const std::filesystem::path dir = testing_util::private_temp_dir("braid_pp_" + preset);
  std::filesystem::create_directories(dir);
  const std::filesystem::path file = dir / "config.json";
  if (!std::filesystem::exists(file)) {
    nn::ModelConfig mc = nn::ModelConfig::preset(preset);
    mc.n_layer = 8;
    mc.save_hf_file(file);
  }
  return file.string();
}

inline nn::ModelConfig deep_tiny(const std::string& preset) {
  nn::ModelConfig mc = nn::ModelConfig::preset(preset);
  mc.n_layer = 8;
  return mc;
}

struct PipelineLayout {
  std::string preset = "gpt2-tiny";
  int pp = 2;
  std::string schedule = "1f1b";
  int chunks = 1;
  int tp = 1;
  bool sp = false;
  std::string strategy = "none";        // over dp = world / (pp x tp)
  std::string sharding = "FULL_SHARD";  // fsdp
  int sharding_factor = 0;
};

// 3 steps, 4 micro-batches (accumulation), clipping on (the norm is above the limit, so the
// norm over every stage decides the coefficient).
inline config::TrainConfig pp_parity_config(const PipelineLayout& l) {
  config::TrainConfig c = tiny(2, 4, l.strategy);
  c.model.preset = "";
  c.model.config = deep_tiny_config(l.preset);
  c.training.max_steps = 3;
  c.parallel.pipeline_parallel_size = l.pp;
  c.parallel.pipeline_schedule = l.schedule;
  c.parallel.pipeline_virtual_stages = l.chunks;
  c.parallel.tensor_parallel_size = l.tp;
  c.parallel.sequence_parallel = l.sp;
  c.parallel.sharding_strategy = l.sharding;
  c.parallel.sharding_factor = l.sharding_factor;
  return c;
}

// One process reading what dp data-parallel replicas of pp_parity_config read.
inline config::TrainConfig pp_reference_config(const std::string& preset, int dp) {
  PipelineLayout one;
  one.preset = preset;
  one.pp = 1;
  config::TrainConfig c = pp_parity_config(one);
  c.training.micro_batch_size = 2 * dp;
  return c;
}

}  // namespace braid::train
