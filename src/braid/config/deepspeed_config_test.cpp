#include "braid/config/deepspeed_config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

#include "braid/core/error.h"
#include "testing/run_ranks.h"

namespace braid::config {
namespace {

TrainConfig yaml() {
  return parse_config(R"(
model: {preset: gpt2-tiny}
data: {random_tokens: true, seq_len: 32}
training: {micro_batch_size: 2, gradient_accumulation_steps: 2, max_steps: 20}
optimizer: {lr: 1.0e-3, weight_decay: 0.05}
schedule: {type: cosine, warmup_steps: 2}
parallel: {strategy: ddp}
)",
                      "x.yaml");
}

std::string error_of(const std::string& ds, int64_t dp = 2) {
  TrainConfig c = yaml();
  return braid::testing::error_of([&] { apply_deepspeed_config(c, ds, "ds.json", dp); });
}

TEST(DeepSpeedConfig, Zero3WithEverything) {
  TrainConfig c = yaml();
  auto entries = apply_deepspeed_config(c, R"({
    "train_batch_size": 32, "gradient_accumulation_steps": 4,
    "gradient_clipping": 0.5, "steps_per_print": 5,
    "bf16": {"enabled": true},
    "zero_optimization": {"stage": 3, "overlap_comm": true,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp/nv", "pin_memory": true},
      "offload_param": {"device": "nvme", "nvme_path": "/tmp/nv"},
      "reduce_bucket_size": 262144, "stage3_param_persistence_threshold": 1000,
      "stage3_gather_16bit_weights_on_model_save": true, "sub_group_size": 1e9},
    "optimizer": {"type": "Adam", "params": {"lr": 3e-4, "betas": [0.8, 0.9], "eps": 1e-6,
                                             "weight_decay": 0.01}},
    "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 20,
                  "warmup_num_steps": 3, "warmup_type": "linear", "cos_min_ratio": 0.1}},
    "communication_data_type": "bf16"
  })",
                                        "ds.json", 2);
  EXPECT_EQ(c.training.global_batch_size, 32);
  EXPECT_EQ(c.training.gradient_accumulation_steps, 4);
  EXPECT_EQ(c.training.micro_batch_size, 4);  // 32 / 4 / 2
  EXPECT_EQ(c.training.precision, "bf16");
  EXPECT_EQ(c.training.reduce_dtype, "bf16");
  EXPECT_EQ(c.training.log_interval, 10);  // steps_per_print is DeepSpeed's own log line
  EXPECT_EQ(c.parallel.strategy, "zero3");
  EXPECT_EQ(c.parallel.offload_optimizer, "nvme");
  EXPECT_EQ(c.parallel.offload_params, "nvme");
  EXPECT_EQ(c.parallel.offload_dir, "/tmp/nv");
  EXPECT_DOUBLE_EQ(c.parallel.bucket_mb, 1.0);  // 262144 f32 elements
  EXPECT_EQ(c.parallel.param_persistence_threshold, 1000);
  EXPECT_EQ(c.optimizer.type, "adamw");  // DeepSpeed's Adam decays decoupled (adam_w_mode)
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.8);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.9);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(c.optimizer.grad_clip, 0.5);
  EXPECT_EQ(c.schedule.type, "cosine");
  EXPECT_EQ(c.schedule.warmup_steps, 3);
  EXPECT_EQ(c.schedule.warmup_type, "linear");
  EXPECT_DOUBLE_EQ(c.schedule.min_lr_ratio, 0.1);
  const std::string shown = describe_dialect("ds.json", entries);
  EXPECT_NE(shown.find("zero_optimization.stage: parallel.strategy = zero3"), std::string::npos);
  EXPECT_NE(shown.find("zero_optimization.overlap_comm: ignored: "), std::string::npos);
  EXPECT_NE(shown.find("zero_optimization.sub_group_size: ignored: "), std::string::npos);
}

TEST(DeepSpeedConfig, AutoKeepsTheYamlAndAbsentBlocksKeepItToo) {
  TrainConfig c = yaml();
  auto entries = apply_deepspeed_config(c, R"({
    "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
    "train_batch_size": "auto", "gradient_clipping": "auto",
    "zero_optimization": {"stage": 1}})",
                                        "ds.json", 2);
  TrainConfig want = yaml();
  want.parallel.strategy = "zero1";
  want.training.global_batch_size = 8;  // 2 x 2 x dp 2
  EXPECT_EQ(config_entries(c), config_entries(want));
  EXPECT_NE(describe_dialect("ds.json", entries).find("gradient_clipping: auto: the YAML's value"),
            std::string::npos);
}

TEST(DeepSpeedConfig, AFileThatIsADirectoryIsNamed) {
  TrainConfig c = yaml();
  const std::string dir = ::testing::TempDir();
  const std::string e = braid::testing::error_of([&] { load_deepspeed_config(c, dir, 2); });
  EXPECT_NE(e.find("--deepspeed: '" + dir + "' is a directory, not a JSON file"), std::string::npos)
      << e;
}

TEST(DeepSpeedConfig, BatchArithmeticAsDeepSpeed) {
  auto batch = [](const std::string& ds, int64_t dp) {
    TrainConfig c = yaml();
    c.training.micro_batch_size = 0;
    c.training.gradient_accumulation_steps = 0;
    apply_deepspeed_config(c, ds, "ds.json", dp);
    return std::to_string(c.training.global_batch_size) + "=" +
           std::to_string(c.training.micro_batch_size) + "x" +
           std::to_string(c.training.gradient_accumulation_steps);
  };
  EXPECT_EQ(batch(R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2})", 2), "16=2x4");
  EXPECT_EQ(batch(R"({"train_batch_size": 16, "gradient_accumulation_steps": 2})", 2), "16=4x2");
  EXPECT_EQ(batch(R"({"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 2})", 4),
            "24=3x2");
  EXPECT_EQ(batch(R"({"train_batch_size": 8})", 4), "8=2x1");
  EXPECT_EQ(batch(R"({"train_micro_batch_size_per_gpu": 5})", 3), "15=5x1");
  EXPECT_EQ(batch(R"({"train_batch_size": 12, "train_micro_batch_size_per_gpu": 2,
                      "gradient_accumulation_steps": 3})",
                  2),
            "12=2x3");
  // DeepSpeed-Ulysses: the 4 ranks hold 2 sequences at a time, 2 ranks each.
  EXPECT_EQ(batch(R"({"train_batch_size": 8, "sequence_parallel_size": 2})", 4), "8=4x1");
}

// sequence_parallel_size is braid's context parallelism in its ulysses mode.
TEST(DeepSpeedConfig, SequenceParallelSizeIsUlysses) {
  TrainConfig c = yaml();
  apply_deepspeed_config(c, R"({"sequence_parallel_size": 2})", "ds.json", 2);
  EXPECT_EQ(c.parallel.context_parallel_size, 2);
  EXPECT_EQ(c.parallel.context_parallel_mode, "ulysses");
  c = yaml();
  apply_deepspeed_config(c, R"({"sequence_parallel_size": 1})", "ds.json", 2);
  EXPECT_EQ(c.parallel.context_parallel_size, 1);
}

// Malformed configs: one line naming the key path (and the numbers where there are numbers).
TEST(DeepSpeedConfig, MalformedConfigsNameTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2,
           "gradient_accumulation_steps": 2})",
       "train_batch_size: 16 != train_micro_batch_size_per_gpu 2 x gradient_accumulation_steps 2 "
       "x data-parallel size 2 (= 8)"},
      {R"({"train_batch_size": 15, "train_micro_batch_size_per_gpu": 2})",
       "train_batch_size: 15 != train_micro_batch_size_per_gpu 2 x gradient_accumulation_steps 3"},
      {R"({"train_batch_size": 3})", "train_batch_size: 3 != train_micro_batch_size_per_gpu 1"},
      {R"({"gradient_accumulation_steps": 2})",
       "either train_batch_size or train_micro_batch_size_per_gpu must be given"},
      {R"({"train_batch_size": 0})", "train_batch_size: must be in [1, "},
      {R"({"train_batch_size": -8})", "train_batch_size: must be in [1, "},
      {R"({"train_batch_size": 2.5})", "train_batch_size: must be an integer or \"auto\", got 2.5"},
      {R"({"train_batch_size": "16"})",
       "train_batch_size: must be an integer or \"auto\", got \"16\""},
      {R"({"train_micro_batch_size_per_gpu": true})",
       "train_micro_batch_size_per_gpu: must be an integer"},
      {R"({"gradient_clipping": -1})", "gradient_clipping: must be in [0, "},
      {R"({"gradient_clipping": "big"})", "gradient_clipping: must be a number or \"auto\""},
      {R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})",
       "fp16.enabled: and bf16.enabled are both true"},
      {R"({"fp16": {"enabled": "yes"}})", "fp16.enabled: must be true or false, got \"yes\""},
      {R"({"fp16": true})", "fp16: must be an object, got true"},
      {R"({"fp16": {"enabled": true, "loss_scale_window": 0}})",
       "fp16.loss_scale_window: must be in [1, "},
      {R"({"fp16": {"enabled": true, "initial_scale_power": 300}})",
       "fp16.initial_scale_power: must be in [0, 126], got 300"},
      {R"({"fp16": {"enabled": true, "fp16_master_weights_and_grads": true}})",
       "fp16.fp16_master_weights_and_grads: not supported yet"},
      {R"({"zero_optimization": {"stage": 4}})",
       "zero_optimization.stage: must be in [0, 3], got 4"},
      {R"({"zero_optimization": {"stage": "auto"}})",
       "zero_optimization.stage: must be an integer, got \"auto\""},
      {R"({"zero_optimization": {"stgae": 2}})",
       "unknown key 'zero_optimization.stgae' (did you mean 'zero_optimization.stage'?)"},
      {R"({"hybrid_engine": {"enabled": true}})", "hybrid_engine: not supported yet"},
      {R"({"learning_rate": 1e-4})",
       "unknown key 'learning_rate': HF TrainingArguments' key, not this file's; in braid it is "
       "optimizer.lr in the braid YAML"},
      {R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "gpu"}}})",
       "zero_optimization.offload_optimizer.device: must be one of none, cpu, nvme, got \"gpu\""},
      {R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})",
       "zero_optimization.offload_param.device: not supported yet (braid offloads parameters only"},
      {R"({"zero_optimization": {"stage": 2, "reduce_bucket_size": -1}})",
       "zero_optimization.reduce_bucket_size: must be in [0, "},
      {R"({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8}})",
       "zero_optimization.zero_hpz_partition_size: not supported yet"},
      {R"({"zero_optimization": {"stage": 3, "mics_shard_size": 8}})",
       "zero_optimization.mics_shard_size: not supported yet"},
      {R"({"optimizer": {"type": "Lamb", "params": {"lr": 1e-3}}})",
       "optimizer.type: not supported yet ('Lamb'"},
      {R"({"optimizer": {"type": "Adamm"}})",
       "optimizer.type: must be one of AdamW, Adam, SGD, got \"Adamm\""},
      {R"({"optimizer": {"params": {"lr": 1e-3}}})", "optimizer.type: missing"},
      {R"({"optimizer": {"type": "AdamW", "params": {"lr": 0}}})",
       "optimizer.params.lr: must be in [1e-30, "},
      {R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9]}}})",
       "optimizer.params.betas: must be [beta1, beta2], got [0.9]"},
      {R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9, 1.5]}}})",
       "optimizer.params.betas: each must be in [0, 1)"},
      {R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false, "weight_decay": 0.1}}})",
       "optimizer.params.adam_w_mode: not supported yet"},
      {R"({"optimizer": {"type": "AdamW", "params": {"amsgrad": true}}})",
       "optimizer.params.amsgrad: not supported yet"},
      {R"({"optimizer": {"type": "AdamW", "params": {"lrr": 1e-3}}})",
       "unknown key 'optimizer.params.lrr' (did you mean 'optimizer.params.lr'?)"},
      {R"({"optimizer": {"type": "SGD", "params": {"momentum": 2}}})",
       "optimizer.params.momentum: must be in [0, 1], got 2"},
      {R"({"scheduler": {"type": "OneCycle", "params": {}}})",
       "scheduler.type: not supported yet ('OneCycle'"},
      {R"({"scheduler": {"type": "WarmupDecay"}})",
       "scheduler.type: must be one of WarmupLR, WarmupDecayLR, WarmupCosineLR"},
      {R"({"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 5}}})",
       "scheduler.params.total_num_steps: missing (WarmupDecayLR needs it"},
      {R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 1e-5}}})",
       "scheduler.params.warmup_min_lr: not supported yet"},
      {R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "cubic"}}})",
       "scheduler.params.warmup_type: must be one of log, linear, got \"cubic\""},
      {R"({"scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 99}}})",
       "scheduler.params.warmup_num_steps: 1000 (DeepSpeed's default) > total_num_steps 99"},
      {R"({"communication_data_type": "int8"})",
       "communication_data_type: must be one of fp32, fp16, bf16, got \"int8\""},
      {R"({"data_types": {"grad_accum_dtype": "bf16"}})",
       "data_types.grad_accum_dtype: not supported yet"},
      {R"({"train_batch_sise": 16})",
       "unknown key 'train_batch_sise' (did you mean 'train_batch_size'?)"},
      {R"({"amp": {"enabled": true}})", "amp: not supported yet"},
      {R"({"sparse_attention": {"mode": "fixed"}})", "sparse_attention: not supported yet"},
      {R"([1, 2])", "ds.json: a DeepSpeed config must be a JSON object, got [1,2]"},
      {R"({"train_batch_size": 16,})", "ds.json: not valid JSON: "},
      {"", "ds.json: not valid JSON: "},
      // nlohmann::json keeps the last of two equal keys; braid refuses them.
      {"{\"gradient_clipping\": 1.0,\n \"train_batch_size\": 16,\n \"gradient_clipping\": 0.5}",
       "ds.json:3: duplicate key 'gradient_clipping' at lines 1 and 3"},
      {"{\"train_batch_size\": 16,\n \"zero_optimization\": {\n  \"stage\": 2,\n  \"stage\": 3}}",
       "ds.json:4: duplicate key 'zero_optimization.stage' at lines 3 and 4"},
  };
  for (const auto& [ds, want] : cases) {
    const std::string e = error_of(ds);
    EXPECT_NE(e.find(want), std::string::npos) << ds << "\n  gave: " << e << "\n  want: " << want;
    EXPECT_EQ(e.find('\n'), std::string::npos) << "one line: " << e;
  }
  EXPECT_GE(cases.size(), 30u);
}

// Random mutations of valid configs: every outcome is success or one braid error, never a
// crash or a foreign exception (the sanitizer build runs this too).
TEST(DeepSpeedConfig, FuzzedMutationsNeverCrash) {
  const std::vector<std::string> seeds = {
      R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2,
          "gradient_accumulation_steps": 4, "gradient_clipping": 1.0,
          "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 16,
                   "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1},
          "zero_optimization": {"stage": 2, "overlap_comm": true, "reduce_bucket_size": 5e8,
                                "offload_optimizer": {"device": "cpu", "pin_memory": true}},
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.999],
                                                    "eps": 1e-8, "weight_decay": 0.01}},
          "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0,
                        "warmup_max_lr": 1e-4, "warmup_num_steps": 5, "total_num_steps": 20}}})",
      R"({"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": "auto"},
          "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 1e4,
                                "stage3_prefetch_bucket_size": 5e7, "sub_group_size": 1e9,
                                "offload_param": {"device": "none"}},
          "optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9}}})"};
  std::mt19937 rng(12345);
  const std::vector<nlohmann::json> values = {nullptr,
                                              true,
                                              -1,
                                              0,
                                              3,
                                              2.5,
                                              1e300,
                                              "auto",
                                              "x",
                                              "nvme",
                                              nlohmann::json::array(),
                                              nlohmann::json::array({1, 2, 3}),
                                              nlohmann::json::object(),
                                              {{"enabled", true}}};
  int ok = 0, errors = 0;
  for (int it = 0; it < 3000; ++it) {
    nlohmann::json j = nlohmann::json::parse(seeds[it % seeds.size()]);
    for (int m = 0; m < 1 + static_cast<int>(rng() % 3); ++m) {
      // Walk to a random member and mutate it: new value, removed, or renamed.
      nlohmann::json* node = &j;
      while (node->is_object() && !node->empty()) {
        auto pos = node->begin();
        std::advance(pos, static_cast<long>(rng() % node->size()));
        if (!pos->is_object() || rng() % 3 == 0) {
          const std::string key = pos.key();
          switch (rng() % 3) {
            case 0:
              (*node)[key] = values[rng() % values.size()];
              break;
            case 1:
              node->erase(key);
              break;
            default: {
              nlohmann::json v = (*node)[key];
              node->erase(key);
              (*node)[key + "_"] = v;
            }
          }
          break;
        }
        node = &*pos;
      }
    }
    TrainConfig c = yaml();
    try {
      apply_deepspeed_config(c, j.dump(), "fuzz.json", 1 + static_cast<int64_t>(rng() % 4));
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

namespace braid::config {
namespace {

// DeepSpeed's defaults for a key missing from a block the file gives, against the YAML above
// (lr 1e-3, decay 0.05, micro 2, accumulation 2): FusedAdam's and torch's optimizer defaults,
// lr_schedules.py's, loss_scaler.py's, runtime/config.py's batch arithmetic; "auto" and a block
// absent from the whole file keep the YAML's (HF Trainer's rule). Values from those sources.
TEST(DeepSpeedConfig, DefaultsTable) {
  struct Row {
    const char* json;
    const char* key;
    const char* value;
  };
  const Row rows[] = {
      {R"({"optimizer": {"type": "Adam", "params": {"lr": 3e-4}}})", "optimizer.beta1", "0.9"},
      {R"({"optimizer": {"type": "Adam", "params": {"lr": 3e-4}}})", "optimizer.beta2", "0.999"},
      {R"({"optimizer": {"type": "Adam", "params": {"lr": 3e-4}}})", "optimizer.eps", "1e-08"},
      {R"({"optimizer": {"type": "Adam", "params": {"lr": 3e-4}}})", "optimizer.weight_decay", "0"},
      {R"({"optimizer": {"type": "AdamW", "params": {"torch_adam": true}}})",
       "optimizer.weight_decay", "0.01"},
      {R"({"optimizer": {"type": "AdamW"}})", "optimizer.lr", "0.001"},
      {R"({"optimizer": {"type": "AdamW", "params": {"weight_decay": "auto"}}})",
       "optimizer.weight_decay", "0.05"},
      {R"({"optimizer": {"type": "SGD", "params": {"lr": 0.1}}})", "optimizer.momentum", "0"},
      {R"({"gradient_clipping": 1.0})", "optimizer.weight_decay", "0.05"},  // no optimizer block
      {R"({"scheduler": {"type": "WarmupLR"}})", "schedule.warmup_steps", "1000"},
      {R"({"scheduler": {"type": "WarmupLR"}})", "schedule.warmup_type", "\"log\""},
      {R"({"scheduler": {"type": "WarmupLR"}})", "optimizer.lr", "0.001"},
      {R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": "auto"}}})",
       "schedule.warmup_steps", "2"},
      {R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 1000}}})",
       "schedule.min_lr_ratio", "1e-04"},
      {R"({"scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 2000,
          "warmup_num_steps": 5}}})",
       "schedule.decay_steps", "2000"},  // longer than the run: DeepSpeed allows it
      {R"({"fp16": {"enabled": true}})", "fp16.loss_scale_window", "1000"},
      {R"({"fp16": {"enabled": true}})", "fp16.hysteresis", "2"},
      {R"({"fp16": {"loss_scale": 128}})", "training.precision", "\"fp32\""},  // enabled: false
      {R"({"bf16": {"enabled": "auto"}})", "training.precision", "\"fp16\""},  // the YAML's
      {R"({"bf16": {"enabled": true}, "fp16": {"enabled": false}})", "training.precision",
       "\"bf16\""},
      {R"({"train_micro_batch_size_per_gpu": 4})", "training.gradient_accumulation_steps", "1"},
      {R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})",
       "training.gradient_accumulation_steps", "4"},  // 32 / 4 / dp 2
      {R"({"train_batch_size": 16})", "training.micro_batch_size", "8"},
      {R"({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 4})",
       "training.micro_batch_size", "2"},
      {R"({"steps_per_print": 2000})", "training.log_interval", "10"},
      // Offload: none unless nvme at its stage (braid's state is in host memory already), not
      // the YAML's nvme: DeepSpeed's default (no offload block), cpu, and below the stage.
      {R"({"zero_optimization": {"stage": 3}})", "parallel.offload_optimizer", "\"none\""},
      {R"({"zero_optimization": {"stage": 3}})", "parallel.offload_params", "\"none\""},
      {R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}})",
       "parallel.offload_optimizer", "\"none\""},
      {R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"},
          "offload_param": {"device": "nvme"}}})",
       "parallel.offload_params", "\"none\""},  // offload_param takes effect from stage 3
      {R"({"gradient_clipping": 1.0})", "parallel.offload_optimizer", "\"none\""},  // stage 0
      // The floor: WarmupDecayLR decays to 0; cos_min_ratio's "auto" is the YAML's 0.3.
      {R"({"scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 1000}}})",
       "schedule.min_lr_ratio", "0"},
      {R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 1000,
          "cos_min_ratio": "auto"}}})",
       "schedule.min_lr_ratio", "0.3"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.json);
    TrainConfig c = yaml();
    // YAML values that DeepSpeed's defaults must replace, or "auto" keep.
    c.optimizer.lr = 7e-4, c.optimizer.beta1 = 0.85, c.optimizer.beta2 = 0.95;
    c.optimizer.eps = 1e-6, c.training.precision = "fp16";
    c.fp16.loss_scale_window = 77, c.fp16.hysteresis = 5;
    c.parallel.offload_optimizer = "nvme", c.parallel.offload_params = "nvme";
    c.schedule.min_lr_ratio = 0.3;
    apply_deepspeed_config(c, row.json, "ds.json", 2);
    const auto entries = config_entries(c);
    auto it = std::find_if(entries.begin(), entries.end(),
                           [&](const auto& e) { return e.first == row.key; });
    ASSERT_NE(it, entries.end()) << row.key;
    EXPECT_EQ(it->second, row.value) << row.key;
  }
}

// On a device, offload_optimizer cpu is ZeRO-Offload (Note [Optimizer state on the host]);
// offload_param cpu is not braid's (files only), so the shards stay on the device.
TEST(DeepSpeedConfig, CpuOffloadOnADeviceIsTheHostStep) {
  TrainConfig c = yaml();
  c.training.device = "cuda";
  apply_deepspeed_config(c, R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "cpu", "pin_memory": true},
      "offload_param": {"device": "cpu"}}})",
                         "ds.json", 2);
  EXPECT_EQ(c.parallel.offload_optimizer, "cpu");
  EXPECT_EQ(c.parallel.offload_params, "none");
}

// --print-config says where a value came from.
TEST(DeepSpeedConfig, NotesSayWhereEachValueCameFrom) {
  TrainConfig c = yaml();
  const std::string said = describe_dialect(
      "ds.json (DeepSpeed)",
      apply_deepspeed_config(c, R"({"optimizer": {"type": "Adam", "params": {"lr": "auto"}},
                                    "hybrid_engine": {"enabled": false}, "wandb": {}})",
                             "ds.json", 2));
  for (const char* line :
       {"#   optimizer.params.lr: auto: the YAML's value\n",
        "#   optimizer.params.betas: absent: DeepSpeed's default, optimizer.beta1 = 0.9, "
        "optimizer.beta2 = 0.999\n",
        "#   hybrid_engine: absent: switched off (enabled false)\n", "#   wandb: absent: empty\n"})
    EXPECT_NE(said.find(line), std::string::npos) << line << " in\n" << said;
}

}  // namespace
}  // namespace braid::config
