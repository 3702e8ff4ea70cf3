// Several ranks on a device (Note [Training device]): thread ranks whose model, gradients and
// optimizer state live on the simulated device (Note [Simulated device]: any host access outside
// a kernel throws), their collectives staged through host memory by the local group (Note
// [Device staging]), give the CPU run's weights bit for bit, strategy by strategy, offload
// included.
#include "braid/parallel/zero/offload_store.h"
#include "braid/parallel/zero/sharded_data_parallel.h"
#include "testing/train/device_ranks_util.h"
#include "testing/train/memory_test_util.h"

namespace braid::train {
namespace {

// Note [Parity setting]: accumulation, clipping and frozen parameters.
TEST_F(DeviceRanks, DdpGivesTheCpuWeightsBitForBit) {
  for (const char* precision : {"fp32", "bf16"}) {
    const config::TrainConfig c = with_strategy(parity_config("true"), "ddp", precision);
    EXPECT_TRUE(braid::testing::bit_equal(train_on(2, c, "cuda"), train_on(2, c, "cpu")))
        << precision;
  }
  const config::TrainConfig local = parity_config("false");  // no_sync, one reduction per step
  EXPECT_TRUE(braid::testing::bit_equal(train_on(2, local, "cuda"), train_on(2, local, "cpu")))
      << "sync_each_batch false";
}

// Every ZeRO stage and FSDP sharding strategy on the device gives the CPU's DDP weights bit for
// bit (they agree with it on the CPU: strategy_parity_test); in bf16 each stage its own CPU run.
TEST_F(DeviceRanks, EveryZeroStageAndFsdpGivesTheCpuWeightsBitForBit) {
  const config::TrainConfig base = parity_config("true");
  const Tensor ddp = train_on(2, with_strategy(base, "ddp", "fp32"), "cpu");
  for (const auto& [strategy, how] :
       std::vector<std::pair<std::string, std::string>>{{"zero1", ""},
                                                        {"zero2", ""},
                                                        {"zero3", ""},
                                                        {"fsdp", "FULL_SHARD"},
                                                        {"fsdp", "SHARD_GRAD_OP"},
                                                        {"fsdp", "NO_SHARD"}}) {
    const Tensor w = train_on(2, with_strategy(base, strategy, "fp32", how), "cuda");
    EXPECT_TRUE(braid::testing::bit_equal(w, ddp)) << strategy << " " << how;
  }
  for (const char* strategy : {"zero1", "zero2", "zero3"}) {
    const config::TrainConfig c = with_strategy(base, strategy, "bf16");
    EXPECT_TRUE(braid::testing::bit_equal(train_on(2, c, "cuda"), train_on(2, c, "cpu")))
        << strategy << " bf16";
  }
  // Hybrid: two shard groups of 2, replicated across.
  const Tensor ddp4 = train_on(4, with_strategy(base, "ddp", "fp32"), "cpu");
  for (const char* how : {"HYBRID_SHARD", "HYBRID_SHARD_ZERO2"}) {
    const Tensor w = train_on(4, with_strategy(base, "fsdp", "fp32", how, 2), "cuda");
    EXPECT_TRUE(braid::testing::bit_equal(w, ddp4)) << how;
  }
}

// Activation checkpointing recomputes on the device: full and selective (every 2nd block),
// under DDP and ZeRO-3, in fp32 and bf16, give the CPU run's weights bit for bit.
TEST_F(DeviceRanks, ActivationCheckpointingGivesTheCpuWeightsBitForBit) {
  const config::TrainConfig base = parity_config("true");
  for (const char* strategy : {"ddp", "zero3"})
    for (const char* policy : {"full", "selective"}) {
      config::TrainConfig c = with_strategy(base, strategy, policy[0] == 'f' ? "fp32" : "bf16");
      c.model.activation_checkpointing = policy;
      if (std::string(policy) == "selective") c.model.activation_checkpointing_interval = 2;
      EXPECT_TRUE(braid::testing::bit_equal(train_on(2, c, "cuda"), train_on(2, c, "cpu")))
          << strategy << " " << policy;
    }
}

// Note [Offload on a device]: the optimizer state (ZeRO-1/2/3), the reduced gradients (2, 3)
// and the parameter shards (3) in the file, paged through host buffers to the device, give the
// CPU's offloaded run's weights bit for bit (which equal DDP's: strategy_parity_test), in fp32
// and bf16.
TEST_F(DeviceRanks, OffloadGivesTheCpuWeightsBitForBit) {
  const config::TrainConfig base = parity_config("true");
  for (const char* strategy : {"zero1", "zero2", "zero3"})
    for (const char* precision : {"fp32", "bf16"}) {
      config::TrainConfig c = with_strategy(base, strategy, precision);
      c.parallel.offload_optimizer = "nvme";
      if (std::string(strategy) == "zero3") c.parallel.offload_params = "nvme";
      c.parallel.offload_dir = private_offload_dir();
      EXPECT_TRUE(braid::testing::bit_equal(train_on(2, c, "cuda"), train_on(2, c, "cpu")))
          << strategy << " " << precision;
    }
}

// Note [Offloaded norm]: the clipped norm from the sums taken as each gradient piece is written,
// and from pieces read back where no sum reaches the global max (every piece here: no sums
// taken), are the same integers, so the same weights bit for bit; in fp32 DDP's.
TEST_F(DeviceRanks, OffloadedNormFromSumsOrReadBackGivesTheSameWeights) {
  const config::TrainConfig base = parity_config("true");
  const Tensor ddp = train_on(2, with_strategy(base, "ddp", "fp32"), "cpu");
  for (const char* precision : {"fp32", "bf16"}) {
    config::TrainConfig c = with_strategy(base, "zero3", precision);
    c.parallel.offload_optimizer = "nvme";
    c.parallel.offload_params = "nvme";
    c.parallel.offload_dir = private_offload_dir();
    const Tensor summed = train_on(2, c, "cpu");
    parallel::set_offloaded_norm_sums_for_testing(0);
    const Tensor read_back = train_on(2, c, "cpu");
    parallel::set_offloaded_norm_sums_for_testing(-1);
    EXPECT_TRUE(braid::testing::bit_equal(read_back, summed)) << precision;
    if (std::string(precision) == "fp32") {
      EXPECT_TRUE(braid::testing::bit_equal(summed, ddp));
    }
  }
}

// Note [Deferred step]: with f32 masters offloaded, each page of a step is updated in the next
// forward (or at the end, before the weights are read), which then gathers from the updated
// masters instead of reading them back: the same weights bit for bit as updating them at the step
// (and DDP's), with two micro-batches, clipping and frozen parameters; and a step's cycle reads
// less. Deferred, everything a step reads is read before its optimizer point (the forward
// updates the pages); at the step, the last step read it all by the end of the step.
TEST_F(DeviceRanks, DeferredOffloadedStepGivesTheSameWeightsAndReadsLess) {
  const config::TrainConfig base = parity_config("true");
  const Tensor ddp = train_on(2, with_strategy(base, "ddp", "fp32"), "cpu");
  config::TrainConfig c = with_strategy(base, "zero3", "fp32");
  c.parallel.offload_optimizer = "nvme";
  c.parallel.offload_params = "nvme";
  c.parallel.offload_dir = private_offload_dir();
  ASSERT_GT(c.optimizer.grad_clip, 0.0);
  auto run = [&](bool deferred, int64_t* before_step3, int64_t* last_step) {
    parallel::set_deferred_step_for_testing(deferred);
    const Tensor w = same_weights_on_every_rank(2, [&](comm::ProcessGroup& pg) {
      TrainerOptions o = quiet();
      Trainer* trainer = nullptr;
      o.fault = [&](int64_t step, const std::string& point) {
        if (step == 3 && point == "optimizer" && pg.rank() == 0)
          *before_step3 = trainer->accelerator().last_step_stats().offload_read_bytes;
      };
      Trainer t(c, borrow(pg), o);
      trainer = &t;
      t.run();
      if (pg.rank() == 0) *last_step = t.accelerator().last_step_stats().offload_read_bytes;
      return t.gather_parameters().to(Device::cpu());
    });
    parallel::set_deferred_step_for_testing(true);
    return w;
  };
  int64_t at_step3 = 0, at_end = 0, deferred_at_step3 = 0, deferred_at_end = 0;
  const Tensor at_step = run(false, &at_step3, &at_end);
  const Tensor deferred = run(true, &deferred_at_step3, &deferred_at_end);
  EXPECT_TRUE(braid::testing::bit_equal(deferred, at_step));
  EXPECT_TRUE(braid::testing::bit_equal(deferred, ddp));
  // A whole cycle: at the step, step 4's reads to its end; deferred, step 3's to its optimizer.
  EXPECT_GT(at_end, at_step3);  // the step read its pages
  EXPECT_LT(deferred_at_step3, at_end);
  EXPECT_GT(deferred_at_step3, at_step3);  // the forward read the pages
}

// Note [Optimizer state on the host]: offload_optimizer cpu keeps the state and a master copy
// on the host and steps there; the same kernel on the same values gives the strategy's CPU run
// (no offload) bit for bit. On the cpu device it is refused, naming the key.
TEST_F(DeviceRanks, OffloadToHostMemoryGivesTheCpuWeightsBitForBit) {
  const config::TrainConfig base = parity_config("true");
  for (const char* strategy : {"zero1", "zero2", "zero3"})
    for (const char* precision : {"fp32", "bf16"}) {
      const config::TrainConfig plain = with_strategy(base, strategy, precision);
      config::TrainConfig host = plain;
      host.parallel.offload_optimizer = "cpu";
      host.training.device = "cuda";
      const Tensor w = same_weights_on_every_rank(2, [&](comm::ProcessGroup& pg) {
        Trainer t(host, borrow(pg), quiet());
        t.run();
        for (const auto& [name, state] : t.accelerator().optimizer().state_tensors())
          EXPECT_TRUE(state.device().is_cpu() && state.is_pinned())
              << name << " on " << state.device().str();
        return t.gather_parameters().to(Device::cpu());
      });
      EXPECT_TRUE(braid::testing::bit_equal(w, train_on(2, plain, "cpu")))
          << strategy << " " << precision;
    }
  config::TrainConfig on_cpu = with_strategy(base, "zero2", "fp32");
  on_cpu.parallel.offload_optimizer = "cpu";
  for (const std::string& e : construction_errors(2, on_cpu)) {
    EXPECT_NE(e.find("parallel.offload_optimizer is 'cpu'"), std::string::npos) << e;
    EXPECT_NE(e.find("cpu device"), std::string::npos) << e;
  }
}

// The estimator's parameters, gradients and optimizer state for offload_optimizer cpu (the
// host masters and one slice's gradient copy beside the resident state) within 10% of the
// tracker's peaks on the simulated device. (Its communication is not compared: the estimator
// does not count the host groups' device staging.)
TEST_F(DeviceRanks, OffloadToHostMemoryIsEstimatedWithinTenPercent) {
  for (const char* strategy : {"zero1", "zero2", "zero3"})
    for (const char* precision : {"fp32", "bf16"}) {
      config::TrainConfig c = tiny(1, 2, strategy);
      c.model.preset = "";
      c.model.config = six_block_model_config();
      c.training.precision = precision;
      c.training.max_steps = 1;  // every peak is reached in the first step
      c.schedule.warmup_steps = 0;
      c.training.device = "cuda";
      c.parallel.offload_optimizer = "cpu";
      const Peaks p = measure_peaks(c, 2);
      const parallel::MemoryEstimate e = parallel::estimate_memory(thread_rank_inputs(c, 2));
      const std::string name = std::string(strategy) + " " + precision;
      print_comparison(name, p, e);
      EXPECT_TRUE(within_10_percent(p.parameters, e.parameters, "parameters")) << name;
      EXPECT_TRUE(within_10_percent(p.gradients, e.gradients, "gradients")) << name;
      EXPECT_TRUE(within_10_percent(p.optimizer_state, e.optimizer_state, "optimizer state"))
          << name;
    }
}

}  // namespace
}  // namespace braid::train
