#include "braid/config/accelerate_config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>

#include "braid/core/error.h"
#include "testing/run_ranks.h"

namespace braid::config {
namespace {

TrainConfig yaml() {
  return parse_config(R"(
model: {preset: gpt2-tiny}
data: {random_tokens: true, seq_len: 32}
training: {micro_batch_size: 2, gradient_accumulation_steps: 1, max_steps: 20}
parallel: {strategy: ddp}
)",
                      "x.yaml");
}

std::string file(const std::string& name) {
  std::ifstream in(std::string(BRAID_REPO_DIR) + "/configs/accelerate/" + name);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(AccelerateConfig, TheConfigsFilesMap) {
  TrainConfig c = yaml();
  apply_accelerate_config(c, file("single.yaml"), "single.yaml", 1);
  EXPECT_EQ(c.parallel.strategy, "none");
  EXPECT_EQ(c.training.precision, "fp32");

  c = yaml();
  apply_accelerate_config(c, file("ddp.yaml"), "ddp.yaml", 2);
  EXPECT_EQ(c.parallel.strategy, "ddp");
  EXPECT_EQ(c.training.precision, "bf16");

  c = yaml();
  auto entries = apply_accelerate_config(c, file("fsdp.yaml"), "fsdp.yaml", 2);
  EXPECT_EQ(c.parallel.strategy, "fsdp");
  EXPECT_EQ(c.parallel.sharding_strategy, "FULL_SHARD");
  EXPECT_TRUE(c.parallel.backward_prefetch);
  EXPECT_FALSE(c.parallel.forward_prefetch);
  const std::string shown = describe_dialect("fsdp.yaml", entries);
  EXPECT_NE(shown.find("fsdp_config.fsdp_auto_wrap_policy: ignored: "), std::string::npos);

  c = yaml();
  entries = apply_accelerate_config(c, file("deepspeed.yaml"), "deepspeed.yaml", 2);
  EXPECT_EQ(c.parallel.strategy, "zero3");
  EXPECT_EQ(c.training.precision, "bf16");
  EXPECT_EQ(c.training.gradient_accumulation_steps, 2);
  EXPECT_EQ(c.training.global_batch_size, 8);  // micro 2 (auto: the YAML's) x 2 x dp 2
  EXPECT_DOUBLE_EQ(c.optimizer.grad_clip, 1.0);
}

TEST(AccelerateConfig, DeepSpeedConfigFileAndHybridShard) {
  TrainConfig c = yaml();
  apply_accelerate_config(c,
                          "distributed_type: DEEPSPEED\n"
                          "deepspeed_config:\n  deepspeed_config_file: " +
                              std::string(BRAID_REPO_DIR) +
                              "/configs/deepspeed/zero3.json\n  zero3_init_flag: true\n",
                          "acc.yaml", 2);
  EXPECT_EQ(c.parallel.strategy, "zero3");
  EXPECT_EQ(c.training.global_batch_size, 16);
  c = yaml();
  apply_accelerate_config(c,
                          "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: 4\n"
                          "  fsdp_activation_checkpointing: true\n",
                          "acc.yaml", 4);
  EXPECT_EQ(c.parallel.sharding_strategy, "HYBRID_SHARD");  // Accelerate's numbering
  EXPECT_EQ(c.model.activation_checkpointing, "full");
  const auto launch = [](const std::string& text) {
    const std::string path = ::testing::TempDir() + "braid_acc_launch.yaml";
    std::ofstream(path) << text;
    return accelerate_launch_settings(path);
  };
  EXPECT_EQ(launch("num_processes: 4\nnum_machines: 2\n").num_processes, 4);
  EXPECT_EQ(launch("num_processes: 4\nnum_machines: 2\n").num_machines, 2);
  EXPECT_EQ(launch("distributed_type: NO\n").num_processes, 0);
  EXPECT_THROW(launch("num_processes: two\n"), Error);
  std::string e = braid::testing::error_of([&] { launch("num_processes: 2\nnum_processes: 4\n"); });
  EXPECT_NE(e.find("braid_acc_launch.yaml:2: duplicate key 'num_processes' at lines 1 and 2"),
            std::string::npos)
      << e;
}

TEST(AccelerateConfig, DuplicateKeysInItsDeepSpeedFileAndADirectoryAreNamed) {
  const std::string ds = ::testing::TempDir() + "braid_acc_twice.json";
  std::ofstream(ds) << "{\"train_batch_size\": 16,\n \"train_batch_size\": 32}\n";
  TrainConfig c = yaml();
  std::string e = braid::testing::error_of([&] {
    apply_accelerate_config(
        c, "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: " + ds + "\n",
        "acc.yaml", 2);
  });
  EXPECT_NE(e.find(ds + ":2: duplicate key 'train_batch_size' at lines 1 and 2"), std::string::npos)
      << e;
  const std::string dir = ::testing::TempDir();
  e = braid::testing::error_of([&] { load_accelerate_config(c, dir, 2); });
  EXPECT_NE(e.find("Accelerate config: '" + dir + "' is a directory, not a file"),
            std::string::npos)
      << e;
}

TEST(AccelerateConfig, MalformedConfigsNameTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"distributed_type: MULTI_CPUS\n",
       "distributed_type: must be one of NO, MULTI_CPU, MULTI_GPU, FSDP, DEEPSPEED"},
      {"distributed_type: TPU\n", "distributed_type: not supported yet (TPU"},
      {"distributed_type: MEGATRON_LM\n", "distributed_type: not supported yet (MEGATRON_LM"},
      {"distributed_type: 'NO'\nnum_processes: 2\n", "distributed_type: NO with num_processes 2"},
      {"num_processes: 0\n", "num_processes: must be in [1, "},
      {"num_processes: two\n", "num_processes: must be an integer, got \"two\""},
      {"num_machines: -1\n", "num_machines: must be in [1, "},
      {"machine_rank: 1.5\n", "machine_rank: must be an integer"},
      {"main_process_port: 70000\n", "main_process_port: must be in [0, 65535], got 70000"},
      {"mixed_precision: fp64\n", "mixed_precision: must be one of no, fp16, bf16, fp8"},
      {"mixed_precision: fp8\n", "mixed_precision: not supported yet (fp8"},
      {"compute_environment: AMAZON_SAGEMAKER\n", "compute_environment: not supported yet"},
      {"compute_environment: CLOUD\n", "compute_environment: must be one of LOCAL_MACHINE"},
      {"debug: maybe\n", "debug: must be true or false, got \"maybe\""},
      {"use_cpu: 3\n", "use_cpu: must be true or false, got 3"},
      {"gradient_accumulation_steps: 0\n", "gradient_accumulation_steps: must be in [1, "},
      {"distributd_type: FSDP\n",
       "unknown key 'distributd_type' (did you mean 'distributed_type'?)"},
      {"distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_stratgy: FULL_SHARD\n",
       "unknown key 'fsdp_config.fsdp_sharding_stratgy' (did you mean "
       "'fsdp_config.fsdp_sharding_strategy'?)"},
      {"distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: HALF_SHARD\n",
       "fsdp_config.fsdp_sharding_strategy: must be one of FULL_SHARD"},
      {"distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: 9\n",
       "fsdp_config.fsdp_sharding_strategy: must be in [1, 5], got 9"},
      {"distributed_type: FSDP\nfsdp_config:\n  fsdp_backward_prefetch: SOMETIMES\n",
       "fsdp_config.fsdp_backward_prefetch: must be one of BACKWARD_PRE, BACKWARD_POST, "
       "NO_PREFETCH"},
      {"distributed_type: FSDP\nfsdp_config:\n  fsdp_forward_prefetch: 2\n",
       "fsdp_config.fsdp_forward_prefetch: must be true or false"},
      {"distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: BLOCK_WRAP\n",
       "fsdp_config.fsdp_auto_wrap_policy: must be one of TRANSFORMER_BASED_WRAP"},
      {"distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 3\n",
       "fsdp_config.fsdp_version: must be in [1, 2], got 3"},
      {"distributed_type: FSDP\nfsdp_config: 5\n", "fsdp_config: must be an object, got 5"},
      {"distributed_type: FSDP\nfsdp_sharding_strategy: FULL_SHARD\n",
       "unknown key 'fsdp_sharding_strategy' (did you mean 'fsdp_config.fsdp_sharding_strategy'?)"},
      {"distributed_type: MULTI_CPU\nlearning_rate: 1.0e-4\n",
       "unknown key 'learning_rate': HF TrainingArguments' key, not this file's; in braid it is "
       "optimizer.lr in the braid YAML"},
      {"num_processes: 2\n", "distributed_type: missing (Accelerate needs it too"},
      {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 5\n",
       "deepspeed_config.zero_stage: must be in [0, 3], got 5"},
      {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  offload_optimizer_device: gpu\n",
       "deepspeed_config.offload_optimizer_device: must be one of none, cpu, nvme, got \"gpu\""},
      {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: no/such.json\n",
       "deepspeed_config.deepspeed_config_file: cannot read 'no/such.json' (a relative path is "
       "taken from the current directory, "},
      {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stag: 2\n",
       "unknown key 'deepspeed_config.zero_stag' (did you mean 'deepspeed_config.zero_stage'?)"},
      {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: /no/such.json\n",
       "deepspeed_config.deepspeed_config_file: cannot read '/no/such.json'"},
      {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: x.json\n"
       "  zero_stage: 3\n",
       "deepspeed_config.zero_stage: is set in deepspeed_config_file's config when that is given"},
      {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  gradient_clipping: -2\n",
       "deepspeed_config.gradient_clipping: must be in [0, "},
      {"distributed_type: MEGATRON_LM\nmegatron_lm_config:\n  megatron_lm_tp_degree: 2\n",
       "distributed_type: not supported yet (MEGATRON_LM"},
      {"distributed_type: FSDP\nparallelism_config:\n  parallelism_config_cp_size: 2\n"
       "  parallelism_config_sp_size: 2\n",
       "parallelism_config.parallelism_config_sp_size: not supported yet (sequence parallelism "
       "beside context parallelism"},
      {"- a\n- b\n", "acc.yaml: an Accelerate config must be a YAML mapping"},
      {"distributed_type: [FSDP\n", "acc.yaml: not valid YAML: "},
      // yaml-cpp keeps both of two equal keys, to_json the last; braid refuses them.
      {"mixed_precision: bf16\ndistributed_type: MULTI_CPU\nmixed_precision: 'no'\n",
       "acc.yaml:3: duplicate key 'mixed_precision' at lines 1 and 3"},
      {"distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n"
       "  fsdp_forward_prefetch: true\n  fsdp_sharding_strategy: NO_SHARD\n",
       "acc.yaml:5: duplicate key 'fsdp_config.fsdp_sharding_strategy' at lines 3 and 5"},
  };
  for (const auto& [text, want] : cases) {
    TrainConfig c = yaml();
    const std::string e =
        braid::testing::error_of([&] { apply_accelerate_config(c, text, "acc.yaml", 2); });
    EXPECT_NE(e.find(want), std::string::npos) << text << "\n  gave: " << e << "\n  want: " << want;
    EXPECT_EQ(e.find('\n'), std::string::npos) << "one line: " << e;
  }
  EXPECT_GE(cases.size(), 30u);
}

// parallelism_config's cp_size (torch's ring attention) and sp_size (ALST / DeepSpeed-Ulysses)
// are braid's context parallelism in its two modes (the corpus's ALST recipe shows the batch
// arithmetic of its DeepSpeed file running over the ranks that are not the sequence's).
TEST(AccelerateConfig, ContextAndSequenceParallelSizesAreContextParallelism) {
  TrainConfig c = yaml();
  apply_accelerate_config(
      c, "distributed_type: FSDP\nparallelism_config:\n  parallelism_config_cp_size: 2\n",
      "acc.yaml", 2);
  EXPECT_EQ(c.parallel.context_parallel_size, 2);
  EXPECT_EQ(c.parallel.context_parallel_mode, "ring");
  c = yaml();
  const auto entries = apply_accelerate_config(
      c,
      "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n"
      "parallelism_config:\n  parallelism_config_sp_size: 2\n  parallelism_config_sp_backend: "
      "deepspeed\n",
      "acc.yaml", 4);
  EXPECT_EQ(c.parallel.context_parallel_size, 2);
  EXPECT_EQ(c.parallel.context_parallel_mode, "ulysses");
  bool noted = false;
  for (const auto& e : entries)
    noted |= e.key == "parallelism_config.parallelism_config_sp_size" &&
             e.effect ==
                 "parallel.context_parallel_size = 2, parallel.context_parallel_mode = "
                 "ulysses";
  EXPECT_TRUE(noted);
}

// Accelerate's defaults for the keys a file leaves out (Note [Accelerate's defaults] in
// accelerate_config.cpp), against a YAML whose values differ from every one of them. Sources,
// accelerate 1.x (the main branch as of this writing, and unchanged in these since 1.0):
//   [cfg]  commands/config/config_args.py, BaseConfig.process_config: no mixed_precision is None.
//   [val]  commands/launch.py, _validate_launch_command: None becomes 'no', exported by every
//          launcher (utils/launch.py) as ACCELERATE_MIXED_PRECISION.
//   [ds]   utils/dataclasses.py, DeepSpeedPlugin.__post_init__: zero_stage from
//          ACCELERATE_DEEPSPEED_ZERO_STAGE, default 2; offload_optimizer_device and
//          offload_param_device default "none"; gradient_accumulation_steps and gradient_clipping
//          default "auto" (HF Trainer fills "auto" from TrainingArguments: the YAML's here).
//   [acc]  accelerator.py, Accelerator.__init__: gradient_accumulation_steps is the script's
//          argument (default 1) unless ACCELERATE_GRADIENT_ACCUMULATION_STEPS is set, which only
//          the DeepSpeed launcher does (from deepspeed_config): the YAML's, the script here.
//   [fsdp] utils/dataclasses.py, FullyShardedDataParallelPlugin.__post_init__, with launch.py's
//          argument defaults: --fsdp_sharding_strategy FULL_SHARD (FSDP1), --fsdp_reshard_after_
//          forward true (FSDP2), --fsdp_forward_prefetch false, --fsdp_offload_params false, no
//          --fsdp_backward_prefetch (None: Accelerator passes backward_prefetch=None to FSDP).
//   [fsdp2] the same __post_init__: for fsdp_version 2, backward_prefetch is set to None with a
//          warning and forward_prefetch is not read; FSDP2 itself prefetches one module ahead in
//          backward (torch's FSDPParamGroup._backward_prefetch) and, in forward, only implicitly
//          through CUDA streams (torch's FSDP notes), which braid counts as no forward prefetch.
TEST(AccelerateConfig, DefaultsTable) {
  struct Row {
    const char* file;
    const char* key;
    const char* value;
  };
  const Row rows[] = {
      // Precision: no mixed_precision is 'no', fp32, under every distributed_type [cfg] [val].
      {"distributed_type: 'NO'\n", "training.precision", "\"fp32\""},
      {"distributed_type: MULTI_CPU\nnum_processes: 2\n", "training.precision", "\"fp32\""},
      {"distributed_type: MULTI_GPU\n", "training.precision", "\"fp32\""},
      {"distributed_type: FSDP\n", "training.precision", "\"fp32\""},
      {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n", "training.precision",
       "\"fp32\""},
      {"distributed_type: DEEPSPEED\nmixed_precision: 'no'\n", "training.precision", "\"fp32\""},
      {"distributed_type: FSDP\nmixed_precision: fp16\n", "training.precision", "\"fp16\""},
      // Accumulation: the script's outside DeepSpeed [acc]; "auto" under it [ds]: the YAML's 5.
      {"distributed_type: 'NO'\n", "training.gradient_accumulation_steps", "5"},
      {"distributed_type: FSDP\n", "training.gradient_accumulation_steps", "5"},
      {"distributed_type: DEEPSPEED\n", "training.gradient_accumulation_steps", "5"},
      {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  gradient_accumulation_steps: 2\n",
       "training.gradient_accumulation_steps", "2"},
      // The batch sizes Accelerate writes as "auto" [ds]: micro the YAML's, global 3 x 5 x dp 2.
      {"distributed_type: DEEPSPEED\n", "training.micro_batch_size", "3"},
      {"distributed_type: DEEPSPEED\n", "training.global_batch_size", "30"},
      // ZeRO stage 2 [ds], with or without a deepspeed_config block.
      {"distributed_type: DEEPSPEED\n", "parallel.strategy", "\"zero2\""},
      {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  gradient_clipping: 1.0\n",
       "parallel.strategy", "\"zero2\""},
      // Clipping "auto" [ds]: the YAML's 0.7; given, the file's.
      {"distributed_type: DEEPSPEED\n", "optimizer.grad_clip", "0.7"},
      {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  gradient_clipping: 1.0\n",
       "optimizer.grad_clip", "1"},
      // Offload "none" [ds], not the YAML's nvme; cpu is host memory, where braid's state is.
      {"distributed_type: DEEPSPEED\n", "parallel.offload_optimizer", "\"none\""},
      {"distributed_type: DEEPSPEED\n", "parallel.offload_params", "\"none\""},
      {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n"
       "  offload_optimizer_device: cpu\n  offload_param_device: cpu\n",
       "parallel.offload_params", "\"none\""},
      {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n"
       "  offload_optimizer_device: nvme\n",
       "parallel.offload_optimizer", "\"nvme\""},
      {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n"
       "  offload_optimizer_device: nvme\n",
       "parallel.offload_params", "\"none\""},
      // FSDP: no offload [fsdp], FULL_SHARD [fsdp], no prefetch either way [fsdp].
      {"distributed_type: FSDP\n", "parallel.offload_optimizer", "\"none\""},
      {"distributed_type: FSDP\nfsdp_config:\n  fsdp_offload_params: true\n",
       "parallel.offload_params", "\"none\""},
      {"distributed_type: FSDP\n", "parallel.sharding_strategy", "\"FULL_SHARD\""},
      {"distributed_type: FSDP\nfsdp_config: {}\n", "parallel.sharding_strategy", "\"FULL_SHARD\""},
      {"distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n", "parallel.sharding_strategy",
       "\"FULL_SHARD\""},
      {"distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n"
       "  fsdp_reshard_after_forward: false\n",
       "parallel.sharding_strategy", "\"SHARD_GRAD_OP\""},
      {"distributed_type: FSDP\n", "parallel.backward_prefetch", "false"},
      {"distributed_type: FSDP\n", "parallel.forward_prefetch", "false"},
      {"distributed_type: FSDP\nfsdp_config:\n  fsdp_backward_prefetch: BACKWARD_PRE\n",
       "parallel.backward_prefetch", "true"},
      // FSDP2 [fsdp2]: its own prefetching, whatever the prefetch keys say.
      {"distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n", "parallel.backward_prefetch",
       "true"},
      {"distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n"
       "  fsdp_backward_prefetch: NO_PREFETCH\n",
       "parallel.backward_prefetch", "true"},
      {"distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n"
       "  fsdp_forward_prefetch: true\n",
       "parallel.forward_prefetch", "false"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.file);
    TrainConfig c = parse_config(R"(
model: {preset: gpt2-tiny}
data: {random_tokens: true, seq_len: 32}
training: {micro_batch_size: 3, gradient_accumulation_steps: 5, max_steps: 5000,
           precision: bf16}
optimizer: {grad_clip: 0.7}
parallel: {strategy: zero3, sharding_strategy: SHARD_GRAD_OP, forward_prefetch: true,
           backward_prefetch: false, offload_optimizer: nvme, offload_params: nvme}
)",
                                 "x.yaml");
    apply_accelerate_config(c, row.file, "acc.yaml", 2);
    const auto entries = config_entries(c);
    auto it = std::find_if(entries.begin(), entries.end(),
                           [&](const auto& e) { return e.first == row.key; });
    ASSERT_NE(it, entries.end()) << row.key;
    EXPECT_EQ(it->second, row.value) << row.key;
  }
}

// Random line mutations of the configs/accelerate files (a value replaced, a line dropped, a key
// misspelt, an indent broken): success or one braid error, never a crash or a foreign exception
// (the sanitizer build runs this too).
TEST(AccelerateConfig, FuzzedMutationsNeverCrash) {
  std::vector<std::vector<std::string>> seeds;
  for (const char* f : {"single.yaml", "ddp.yaml", "fsdp.yaml", "deepspeed.yaml"}) {
    std::istringstream in(file(f));
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    seeds.push_back(lines);
  }
  std::mt19937 rng(4242);
  const std::vector<std::string> values = {"null", "true", "-1",   "0",         "2",
                                           "7.5",  "auto", "FSDP", "DEEPSPEED", "bf16",
                                           "'NO'", "[]",   "{}",   "[1, 2",     "{zero_stage: 3}",
                                           "\"",   "~",    "1e400"};
  int ok = 0, errors = 0;
  for (int it = 0; it < 3000; ++it) {
    std::vector<std::string> lines = seeds[it % seeds.size()];
    for (int m = 0; m < 1 + static_cast<int>(rng() % 3) && !lines.empty(); ++m) {
      const size_t i = rng() % lines.size();
      std::string& line = lines[i];
      const size_t colon = line.find(':');
      switch (rng() % 4) {
        case 0:
          if (colon != std::string::npos)
            line = line.substr(0, colon + 1) + " " + values[rng() % values.size()];
          break;
        case 1:
          lines.erase(lines.begin() + static_cast<long>(i));
          break;
        case 2:
          if (colon != std::string::npos && colon > 0) line.insert(colon - 1, "x");
          break;
        default:
          line = (line.rfind("  ", 0) == 0 ? line.substr(2) : "  " + line);
      }
    }
    std::string text;
    for (const auto& l : lines) text += l + "\n";
    TrainConfig c = yaml();
    try {
      apply_accelerate_config(c, text, "fuzz.yaml", 1 + static_cast<int64_t>(rng() % 4));
      ++ok;
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(ok, 0);
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace braid::config
