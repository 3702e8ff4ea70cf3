#include "braid/config/provenance.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "braid/config/accelerate_config.h"
#include "braid/config/config.h"
#include "braid/config/deepspeed_config.h"

namespace braid::config {
namespace {

// Every line of a dumped config as key -> (value, origin): "  lr: 0.0003   # ds.json: x" gives
// "optimizer.lr" -> ("0.0003", "ds.json: x").
std::map<std::string, std::pair<std::string, std::string>> lines_of(const std::string& dumped) {
  std::map<std::string, std::pair<std::string, std::string>> out;
  std::istringstream in(dumped);
  std::string section;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] != ' ') {
      section = line.substr(0, line.find(':'));
      continue;
    }
    const size_t colon = line.find(": ");
    const size_t hash = line.rfind("  # ");
    std::string value = line.substr(colon + 2, hash == std::string::npos ? hash : hash - colon - 2);
    value.erase(value.find_last_not_of(' ') + 1);
    out[section + "." + line.substr(2, colon - 2)] = {
        value, hash == std::string::npos ? "" : line.substr(hash + 4)};
  }
  return out;
}

// The YAML of the examples below, line by line.
const char* kYaml =
    "model: {preset: gpt2-tiny}\n"                           // 1
    "data: {random_tokens: true, seq_len: 32}\n"             // 2
    "training:\n"                                            // 3
    "  micro_batch_size: 4\n"                                // 4
    "  max_steps: 100\n"                                     // 5
    "optimizer:\n"                                           // 6
    "  lr: 2.0e-3\n"                                         // 7
    "  beta2: 0.99\n"                                        // 8
    "  weight_decay: 0.1\n"                                  // 9
    "parallel: {strategy: ddp, offload_optimizer: nvme}\n";  // 10

// A braid YAML, a DeepSpeed file and --set: each kind of line says where its value came from.
TEST(Provenance, EachValueSaysWhereItCameFrom) {
  Provenance origins;
  TrainConfig c = parse_config(kYaml, "x.yaml", &origins);
  origins.add(apply_deepspeed_config(c, R"({
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": "auto"}},
    "zero_optimization": {"stage": 2}
  })",
                                     "ds.json", 2));
  apply_override(c, "training.max_steps=10", &origins);
  const std::string dumped = dump_config(c, &origins);
  const auto lines = lines_of(dumped);
  const std::pair<const char*, const char*> want[] = {
      {"data.seq_len", "x.yaml:2"},  // a flow mapping's key has its line too
      {"model.preset", "x.yaml:1"},
      {"training.max_steps", "--set"},
      {"training.seed", "braid default"},
      {"optimizer.lr", "ds.json: optimizer.params.lr"},
      {"optimizer.eps", "ds.json: no optimizer.params.eps: DeepSpeed's default"},
      {"optimizer.weight_decay", "ds.json: no optimizer.params.weight_decay: DeepSpeed's default"},
      {"optimizer.beta2", "ds.json: optimizer.params.betas \"auto\": the YAML's value (x.yaml:8)"},
      {"optimizer.beta1",
       "ds.json: optimizer.params.betas \"auto\": the YAML's value (braid default)"},
      {"training.micro_batch_size",
       "ds.json: train_micro_batch_size_per_gpu \"auto\": the YAML's value (x.yaml:4)"},
      {"training.gradient_accumulation_steps", "ds.json: gradient_accumulation_steps"},
      {"training.global_batch_size",
       "derived: global_batch_size = micro 4 x accumulation 2 x dp 2 (ds.json)"},
      {"parallel.strategy", "ds.json: zero_optimization.stage"},
      {"parallel.offload_optimizer",
       "ds.json: no zero_optimization.offload_optimizer: DeepSpeed's default"},
  };
  for (const auto& [key, origin] : want) {
    ASSERT_TRUE(lines.count(key)) << key << " in\n" << dumped;
    EXPECT_EQ(lines.at(key).second, origin) << key << " in\n" << dumped;
  }
  EXPECT_EQ(lines.at("training.global_batch_size").first, "16");
  EXPECT_EQ(lines.at("parallel.offload_optimizer").first, "\"none\"");  // not the YAML's nvme
  // Every line has an origin, and the commented text reads back as the same config.
  EXPECT_EQ(lines.size(), config_entries(c).size());
  for (const auto& [key, line] : lines) EXPECT_FALSE(line.second.empty()) << key;
  EXPECT_EQ(config_entries(parse_config(dumped, "printed.yaml")), config_entries(c));
  EXPECT_EQ(dump_config(parse_config(dumped, "printed.yaml")), dump_config(c));
}

// "auto" after an earlier key of the same file set the value keeps that key's origin, and a
// later explicit key replaces it.
TEST(Provenance, AutoKeepsWhatTheFileSetBefore) {
  Provenance origins;
  TrainConfig c = parse_config(kYaml, "x.yaml", &origins);
  origins.add(apply_deepspeed_config(c, R"({
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4}},
    "scheduler": {"type": "WarmupDecayLR",
                  "params": {"warmup_max_lr": "auto", "total_num_steps": "auto",
                             "warmup_num_steps": "auto"}}
  })",
                                     "ds.json", 1));
  const auto lines = lines_of(dump_config(c, &origins));
  EXPECT_EQ(lines.at("optimizer.lr").second, "ds.json: optimizer.params.lr");
  EXPECT_EQ(lines.at("schedule.type").second, "ds.json: scheduler.type");
  EXPECT_EQ(lines.at("schedule.min_lr_ratio").second, "ds.json: scheduler.type");
  EXPECT_EQ(lines.at("schedule.decay_steps").second, "ds.json: scheduler.params.total_num_steps");
  EXPECT_EQ(lines.at("schedule.warmup_steps").second,
            "ds.json: scheduler.params.warmup_num_steps \"auto\": the YAML's value (braid "
            "default)");
  EXPECT_EQ(lines.at("schedule.warmup_type").second,
            "ds.json: no scheduler.params.warmup_type: DeepSpeed's default");
}

// Every DeepSpeed key that may say "auto" names the YAML value it keeps (Note [What "auto"
// keeps] in deepspeed_config.cpp).
TEST(Provenance, EveryAutoNamesTheYamlValueItKeeps) {
  Provenance origins;
  TrainConfig c = parse_config(kYaml, "x.yaml", &origins);
  origins.add(apply_deepspeed_config(c, R"({
    "train_micro_batch_size_per_gpu": "auto", "gradient_clipping": "auto",
    "fp16": {"enabled": "auto", "loss_scale": "auto", "initial_scale_power": "auto",
             "loss_scale_window": "auto", "hysteresis": "auto", "consecutive_hysteresis": "auto",
             "min_loss_scale": "auto"},
    "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
                          "stage3_param_persistence_threshold": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto",
                                              "eps": "auto", "betas": "auto"}},
    "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": "auto",
                  "cos_min_ratio": "auto", "total_num_steps": "auto"}}
  })",
                                     "ds.json", 1));
  for (const char* key :
       {"training.micro_batch_size", "optimizer.grad_clip", "training.precision", "fp16.loss_scale",
        "fp16.initial_scale_power", "fp16.loss_scale_window", "fp16.hysteresis",
        "fp16.consecutive_hysteresis", "fp16.min_loss_scale", "parallel.bucket_mb",
        "parallel.param_persistence_threshold", "optimizer.lr", "optimizer.weight_decay",
        "optimizer.eps", "optimizer.beta1", "optimizer.beta2", "schedule.warmup_steps",
        "schedule.min_lr_ratio"}) {
    const std::string origin = origins.of(key);
    EXPECT_NE(origin.find("\"auto\": the YAML's value ("), std::string::npos)
        << key << ": " << origin;
  }
  EXPECT_EQ(origins.of("optimizer.lr"),
            "ds.json: optimizer.params.lr \"auto\": the YAML's value (x.yaml:7)");
}

// An Accelerate file's values are said of its own keys, Accelerate's defaults of the keys it
// leaves out, and a deepspeed_config_file's of that file.
TEST(Provenance, AccelerateKeysAndItsDefaults) {
  Provenance origins;
  TrainConfig c = parse_config(kYaml, "x.yaml", &origins);
  origins.add(apply_accelerate_config(c,
                                      "distributed_type: DEEPSPEED\n"
                                      "deepspeed_config:\n"
                                      "  gradient_accumulation_steps: 2\n",
                                      "acc.yaml", 2));
  auto lines = lines_of(dump_config(c, &origins));
  EXPECT_EQ(lines.at("parallel.strategy").second,
            "acc.yaml: no deepspeed_config.zero_stage: Accelerate's default");
  EXPECT_EQ(lines.at("parallel.strategy").first, "\"zero2\"");
  EXPECT_EQ(lines.at("training.gradient_accumulation_steps").second,
            "acc.yaml: deepspeed_config.gradient_accumulation_steps");
  EXPECT_EQ(lines.at("training.precision").second,
            "acc.yaml: no mixed_precision: Accelerate's default");
  EXPECT_EQ(lines.at("optimizer.grad_clip").second,
            "acc.yaml: no deepspeed_config.gradient_clipping: Accelerate's \"auto\", the YAML's "
            "value (braid default)");
  EXPECT_EQ(lines.at("training.micro_batch_size").second,
            "acc.yaml: Accelerate's train_micro_batch_size_per_gpu \"auto\": the YAML's value "
            "(x.yaml:4)");
  EXPECT_EQ(lines.at("parallel.offload_optimizer").second,
            "acc.yaml: no deepspeed_config.offload_optimizer_device: Accelerate's default");

  const std::string ds = ::testing::TempDir() + "braid_provenance_ds.json";
  std::ofstream(ds) << R"({"zero_optimization": {"stage": 3}, "bf16": {"enabled": "auto"}})";
  origins = Provenance();
  c = parse_config(kYaml, "x.yaml", &origins);
  const auto entries = apply_accelerate_config(c,
                                               "distributed_type: DEEPSPEED\n"
                                               "mixed_precision: bf16\n"
                                               "deepspeed_config:\n"
                                               "  deepspeed_config_file: " +
                                                   ds + "\n",
                                               "acc.yaml", 2);
  origins.add(entries);
  lines = lines_of(dump_config(c, &origins));
  EXPECT_EQ(lines.at("parallel.strategy").second, ds + ": zero_optimization.stage");
  // bf16's "auto" keeps what mixed_precision, before it, set.
  EXPECT_EQ(lines.at("training.precision").second, "acc.yaml: mixed_precision");
  EXPECT_NE(describe_dialect("acc.yaml (Accelerate)", entries).find("# from " + ds + "\n"),
            std::string::npos);
}

}  // namespace
}  // namespace braid::config
