#include "braid/config/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "braid/config/duplicate_keys.h"
#include "braid/core/error.h"

namespace braid::config {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, ParsesSectionsAndOverrides) {
  TrainConfig c = parse_config(R"(
model: {preset: gpt2-tiny}
data: {train: data/x, seq_len: 64}
training: {micro_batch_size: 4, gradient_accumulation_steps: 2, max_steps: 5}
optimizer: {lr: 1.0e-3}
parallel: {strategy: ddp}
)",
                               "t.yaml");
  EXPECT_EQ(c.model.preset, "gpt2-tiny");
  EXPECT_EQ(c.data.seq_len, 64);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  apply_override(c, "training.max_steps=7");
  apply_override(c, "optimizer.type=sgd");
  EXPECT_EQ(c.training.max_steps, 7);
  EXPECT_EQ(c.optimizer.type, "sgd");
  validate(c);
  // The dump parses back to the same config.
  TrainConfig d = parse_config(dump_config(c), "dump");
  EXPECT_EQ(dump_config(d), dump_config(c));
}

TEST(Config, UnknownKeysAndBadTypesNameThePath) {
  std::string e = error_of([] { parse_config("training:\n  max_step: 3\n", "c.yaml"); });
  EXPECT_NE(e.find("c.yaml:2"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key 'training.max_step'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'training.max_steps'"), std::string::npos) << e;
  e = error_of([] { parse_config("optimizer:\n  lr: fast\n", "c.yaml"); });
  EXPECT_NE(e.find("'optimizer.lr' must be a number, got 'fast'"), std::string::npos) << e;
  e = error_of([] { parse_config("optimiser: {lr: 1}\n", "c.yaml"); });
  EXPECT_NE(e.find("unknown key 'optimiser'"), std::string::npos) << e;
  TrainConfig c;
  e = error_of([&] { apply_override(c, "parallel.bucket=3"); });
  EXPECT_NE(e.find("unknown key 'parallel.bucket'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'parallel.bucket_mb'"), std::string::npos) << e;
  // A typo inside the name, and a key in the wrong section.
  e = error_of([] { parse_config("training:\n  global_bach_size: 8\n", "c.yaml"); });
  EXPECT_NE(e.find("did you mean 'training.global_batch_size'"), std::string::npos) << e;
  e = error_of([&] { apply_override(c, "optimizer.warmup_steps=3"); });
  EXPECT_NE(e.find("did you mean 'schedule.warmup_steps'"), std::string::npos) << e;
  // Nothing close: no guess.
  e = error_of([] { parse_config("training:\n  banana: 8\n", "c.yaml"); });
  EXPECT_EQ(e.find("did you mean"), std::string::npos) << e;
  c.model.preset = "gpt2-tiny";
  c.data.random_tokens = true;
  c.parallel.strategy = "zero9";
  e = error_of([&] { validate(c); });
  EXPECT_NE(e.find("parallel.strategy"), std::string::npos) << e;
}

TEST(Config, DuplicateKeysNameBothLines) {
  std::string e = error_of(
      [] { parse_config("training:\n  max_steps: 3\n  seed: 1\n  max_steps: 5\n", "c.yaml"); });
  EXPECT_NE(e.find("c.yaml:4: duplicate key 'training.max_steps' at lines 2 and 4"),
            std::string::npos)
      << e;
  // A section given twice, each half valid on its own.
  e = error_of([] {
    parse_config("training: {max_steps: 3}\noptimizer: {lr: 1}\ntraining: {seed: 2}\n", "c.yaml");
  });
  EXPECT_NE(e.find("c.yaml:3: duplicate key 'training' at lines 1 and 3"), std::string::npos) << e;
  e = error_of([] { parse_config("model: {preset: gpt2-tiny, preset: gpt2-small}\n", "c.yaml"); });
  EXPECT_NE(e.find("c.yaml:1: duplicate key 'model.preset' twice on line 1 (columns 9 and 28)"),
            std::string::npos)
      << e;
  // The same key in two sections, or in two mappings of a list, is no duplicate; nor is the
  // same value written twice (it means one thing, and real Accelerate files do it).
  EXPECT_NO_THROW(parse_config("training: {seed: 1}\nmodel: {preset: gpt2-tiny}\n", "c.yaml"));
  EXPECT_EQ(
      parse_config("training:\n  seed: 7\n  max_steps: 3\n  seed: 7\n", "c.yaml").training.seed, 7);
}

TEST(Config, DuplicateJsonKeysNameBothLinesAndTheirPath) {
  std::string e = error_of([] {
    reject_duplicate_json_keys("{\n \"zero_optimization\": {\"stage\": 2,\n  \"stage\": 3}\n}",
                               "ds.json");
  });
  EXPECT_NE(e.find("ds.json:3: duplicate key 'zero_optimization.stage' at lines 2 and 3"),
            std::string::npos)
      << e;
  // Escapes decode as the parser decodes them: "b\u0066\u0031\u0036" is "bf16".
  e = error_of([] {
    reject_duplicate_json_keys(R"({"bf16": {"enabled": true}, "b\u0066\u0031\u0036": {}})",
                               "ds.json");
  });
  EXPECT_NE(e.find("ds.json:1: duplicate key 'bf16' twice on line 1 (columns 2 and 29)"),
            std::string::npos)
      << e;
  // Quotes, braces and commas inside strings, and equal keys in sibling objects, are no
  // duplicates.
  EXPECT_NO_THROW(reject_duplicate_json_keys(
      R"({"a": "} { \"a\": ,", "b": [{"a": 1}, {"a": 2}], "c": {"a": [1, {"a": 2}]}})", "t.json"));
}

TEST(Config, ARunYamlThatIsADirectoryOrEmptyNamesTheFile) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "braid_config_test_dir.yaml";
  fs::create_directories(dir);
  std::string e = error_of([&] { load_config(dir.string()); });
  EXPECT_NE(e.find("config file '" + dir.string() + "' is a directory, not a YAML file"),
            std::string::npos)
      << e;
  const fs::path empty = fs::path(::testing::TempDir()) / "braid_config_test_empty.yaml";
  for (const char* text : {"", "# only a comment\n\n"}) {
    std::ofstream(empty) << text;
    e = error_of([&] { load_config(empty.string()); });
    EXPECT_NE(e.find("config file '" + empty.string() + "' is empty (no keys)"), std::string::npos)
        << e;
  }
  const fs::path twice = fs::path(::testing::TempDir()) / "braid_config_test_twice.yaml";
  std::ofstream(twice) << "model:\n  preset: gpt2-tiny\ntraining:\n  max_steps: 3\n"
                          "  max_steps: 300\n";
  e = error_of([&] { load_config(twice.string()); });
  EXPECT_NE(e.find(twice.string() + ":5: duplicate key 'training.max_steps' at lines 4 and 5"),
            std::string::npos)
      << e;
}

TEST(Config, BatchArithmeticDerivesAndChecks) {
  TrainConfig c;
  c.training.micro_batch_size = 4;
  c.training.global_batch_size = 32;
  resolve_batch(c, 2);
  EXPECT_EQ(c.training.gradient_accumulation_steps, 4);

  TrainConfig d;
  d.training.global_batch_size = 24;
  d.training.gradient_accumulation_steps = 3;
  resolve_batch(d, 4);
  EXPECT_EQ(d.training.micro_batch_size, 2);

  TrainConfig e;
  e.training.micro_batch_size = 4;
  e.training.gradient_accumulation_steps = 2;
  e.training.global_batch_size = 10;
  std::string msg = error_of([&] { resolve_batch(e, 2); });
  EXPECT_NE(msg.find("global_batch_size 10 != micro_batch_size 4 x "
                     "gradient_accumulation_steps 2 x data-parallel size 2 = 16"),
            std::string::npos)
      << msg;

  TrainConfig f;
  f.training.micro_batch_size = 3;
  f.training.global_batch_size = 8;
  msg = error_of([&] { resolve_batch(f, 2); });
  EXPECT_NE(msg.find("not divisible"), std::string::npos) << msg;
}

}  // namespace
}  // namespace braid::config
