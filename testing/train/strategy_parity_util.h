// Shared by the strategy parity tests (thread-backed ranks and real processes under mpirun):
// every data-parallel strategy, configured on top of ddp_parity_util.h's tiny run.
//
// Note [Parity setting]: 4 optimizer steps that each accumulate 2 micro-steps, clip (the tiny
// model's norm is above the limit, so the coefficient matters: the test checks that clipping
// changes the result), and freeze the position embedding and the first block's first norm.
// Bit-identity holds between strategies that accumulate the same way (Note [Accumulation order],
// parallel/ddp/replicated_data_parallel.h), so each mode compares every strategy with DDP set to
// that mode.
#pragma once

#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "testing/private_temp_dir.h"
#include "testing/train/ddp_parity_util.h"

namespace braid::train {

struct StrategyVariant {
  std::string name;
  int min_ranks = 1;     // hybrid layouts need two shard groups
  int rank_divisor = 1;  // world sizes it needs to divide (sharding factor)
  std::function<void(config::TrainConfig&)> apply;
};

using testing_util::private_temp_dir;

// Offload files of this process only (ranks name their own files inside it).
inline std::string private_offload_dir() {
  return private_temp_dir("braid_offload_test").string();
}

inline std::vector<StrategyVariant> strategy_variants() {
  auto set = [](std::string strategy, std::string how = "", int factor = 0) {
    return [=](config::TrainConfig& c) {
      c.parallel.strategy = strategy;
      if (!how.empty()) c.parallel.sharding_strategy = how;
      c.parallel.sharding_factor = factor;
    };
  };
  return {
      {"zero1", 1, 1, set("zero1")},
      {"zero2", 1, 1, set("zero2")},
      {"zero3", 1, 1, set("zero3")},
      {"fsdp_FULL_SHARD", 1, 1, set("fsdp", "FULL_SHARD")},
      {"fsdp_SHARD_GRAD_OP", 1, 1, set("fsdp", "SHARD_GRAD_OP")},
      {"fsdp_NO_SHARD", 1, 1, set("fsdp", "NO_SHARD")},
      {"fsdp_HYBRID_SHARD_2", 4, 2, set("fsdp", "HYBRID_SHARD", 2)},
      {"fsdp_HYBRID_SHARD_ZERO2_2", 4, 2, set("fsdp", "HYBRID_SHARD_ZERO2", 2)},
      {"zero3_no_prefetch_persistent_head", 1, 1,
       [](config::TrainConfig& c) {
         c.parallel.strategy = "zero3";
         c.parallel.forward_prefetch = false;
         c.parallel.backward_prefetch = false;
         c.parallel.param_persistence_threshold = 200;  // the tied head (ln_f) stays whole
       }},
      // FSDP2's per-module policy: the embeddings whole on every rank, the first block kept
      // gathered from its forward to its backward, the rest FULL_SHARD.
      {"zero3_per_unit_policy", 1, 1,
       [](config::TrainConfig& c) {
         c.parallel.strategy = "zero3";
         c.parallel.unsharded_units = "embeddings";
         c.parallel.keep_gathered_units = "block.0";
       }},
      {"zero3_activation_checkpointing", 1, 1,
       [](config::TrainConfig& c) {
         c.parallel.strategy = "zero3";
         c.model.activation_checkpointing = "full";
       }},
      {"zero3_selective_checkpointing_every_2", 1, 1,
       [](config::TrainConfig& c) {
         c.parallel.strategy = "zero3";
         c.model.activation_checkpointing = "selective";
         c.model.activation_checkpointing_interval = 2;
       }},
      {"zero3_offload_optimizer_and_params_nvme", 1, 1,
       [](config::TrainConfig& c) {
         c.parallel.strategy = "zero3";
         c.parallel.offload_optimizer = "nvme";
         c.parallel.offload_params = "nvme";
         c.parallel.offload_dir = private_offload_dir();
       }},
      {"zero2_offload_optimizer_nvme", 1, 1,
       [](config::TrainConfig& c) {
         c.parallel.strategy = "zero2";
         c.parallel.offload_optimizer = "nvme";
         c.parallel.offload_dir = private_offload_dir();
       }},
      {"zero1_offload_optimizer_nvme", 1, 1,
       [](config::TrainConfig& c) {
         c.parallel.strategy = "zero1";
         c.parallel.offload_optimizer = "nvme";
         c.parallel.offload_dir = private_offload_dir();
       }},
  };
}

// Note [Parity setting].
inline config::TrainConfig parity_config(const std::string& sync_each_batch) {
  config::TrainConfig c = tiny(1, 2, "ddp");
  c.training.max_steps = 4;
  c.schedule.warmup_steps = 1;
  c.model.freeze = "transformer.wpe,transformer.h.0.ln_1.";
  c.parallel.sync_each_batch = sync_each_batch;
  return c;
}

// A GPT-2 whose six blocks hold most of its 1.3M parameters (memory claims are about sharding
// the blocks): the path of its config.json.
inline std::string six_block_model_config() {
  namespace fs = std::filesystem;
  fs::path dir = private_temp_dir("braid_six_block_model");
  fs::create_directories(dir);
  std::ofstream(dir / "config.json")
      << R"({"model_type": "gpt2", "vocab_size": 1024, "n_positions": 64, "n_embd": 128,
             "n_layer": 6, "n_head": 4})";
  return (dir / "config.json").string();
}

inline Tensor train_and_gather(Trainer& t) {
  t.run();
  return t.gather_parameters();
}

// Runs train(pg) on n thread-backed ranks, each returning its weights; rank 0's (every rank must
// hold the same).
inline Tensor same_weights_on_every_rank(int n,
                                         const std::function<Tensor(comm::ProcessGroup&)>& train) {
  std::vector<Tensor> out(static_cast<size_t>(n));
  std::mutex mu;
  braid::testing::run_ranks(n, [&](comm::ProcessGroup& pg) {
    Tensor w = train(pg);
    std::lock_guard<std::mutex> lock(mu);
    out[static_cast<size_t>(pg.rank())] = w;
  });
  for (int r = 1; r < n; ++r)
    EXPECT_TRUE(braid::testing::bit_equal(out[static_cast<size_t>(r)], out[0])) << "rank " << r;
  return out[0];
}

// Trains cfg on n thread-backed ranks; rank 0's gathered weights (every rank must hold the same).
inline Tensor train_ranks(int n, const config::TrainConfig& cfg, TrainerOptions options = quiet()) {
  return same_weights_on_every_rank(n, [&](comm::ProcessGroup& pg) {
    Trainer t(cfg, borrow(pg), options);
    return train_and_gather(t);
  });
}

}  // namespace braid::train
