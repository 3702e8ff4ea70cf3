#include "braid/config/accelerate_questions.h"

#include <gtest/gtest.h>

#include <sstream>

#include "braid/config/accelerate_config.h"
#include "braid/core/error.h"
#include "testing/run_ranks.h"

namespace braid::config {
namespace {

// Answers the questions with `answers` (one per line) and reads the written YAML back as braid
// does; `prompts` gets what was asked.
TrainConfig answer(const std::string& answers, std::string* prompts = nullptr,
                   std::string* yaml = nullptr) {
  std::istringstream in(answers);
  std::ostringstream out;
  const std::string text = ask_accelerate_config(in, out);
  if (prompts) *prompts = out.str();
  if (yaml) *yaml = text;
  TrainConfig c = parse_config(
      "model: {preset: gpt2-tiny}\ndata: {random_tokens: true}\n"
      "training: {micro_batch_size: 2, gradient_accumulation_steps: 1, max_steps: 10}\n",
      "x.yaml");
  apply_accelerate_config(c, text, "written.yaml", 2);
  return c;
}

TEST(AccelerateQuestions, EachPathWritesAConfigBraidReads) {
  // Defaults everywhere: multi-CPU, 1 machine, 2 processes, no DeepSpeed, no FSDP, no precision.
  std::string yaml;
  TrainConfig c = answer("\n\n\n\n\n\n\n", nullptr, &yaml);
  EXPECT_EQ(c.parallel.strategy, "ddp");
  EXPECT_EQ(c.training.precision, "fp32");
  EXPECT_NE(yaml.find("num_processes: 2\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("distributed_type: MULTI_CPU\n"), std::string::npos) << yaml;

  c = answer("1\n1\nbf16\n");  // no distributed training, bf16
  EXPECT_EQ(c.parallel.strategy, "none");
  EXPECT_EQ(c.training.precision, "bf16");

  // FSDP: HYBRID_SHARD (by number), no prefetch, checkpointing.
  c = answer("\n2\n1\n4\nno\nyes\n4\n3\nno\nyes\nfp16\n");
  EXPECT_EQ(c.parallel.strategy, "fsdp");
  EXPECT_EQ(c.parallel.sharding_strategy, "HYBRID_SHARD");
  EXPECT_FALSE(c.parallel.backward_prefetch);
  EXPECT_EQ(c.model.activation_checkpointing, "full");
  EXPECT_EQ(c.training.precision, "fp16");

  // DeepSpeed ZeRO-2, cpu offload, accumulation 4, clipping 0.5.
  c = answer("\n\n\n2\nyes\n2\ncpu\n4\nyes\n0.5\nno\n");
  EXPECT_EQ(c.parallel.strategy, "zero2");
  EXPECT_EQ(c.training.gradient_accumulation_steps, 4);
  EXPECT_DOUBLE_EQ(c.optimizer.grad_clip, 0.5);
}

TEST(AccelerateQuestions, BadAnswersAreAskedAgainAndAnEndedInputIsAnError) {
  std::string prompts;
  TrainConfig c = answer("\n7\nmulti-cpu\n0\n1\n2\nmaybe\nno\nno\nfp32\nbf16\n", &prompts);
  EXPECT_NE(prompts.find("Please enter a number from 1 to 2 or a name."), std::string::npos);
  EXPECT_NE(prompts.find("Please enter a whole number from 1 to 100000."), std::string::npos);
  EXPECT_NE(prompts.find("Please enter yes or no."), std::string::npos);
  EXPECT_NE(prompts.find("Please enter a number from 1 to 3 or a name."), std::string::npos);
  EXPECT_EQ(c.parallel.strategy, "ddp");
  EXPECT_EQ(c.training.precision, "bf16");
  std::istringstream in("\n2\n");
  std::ostringstream out;
  EXPECT_NE(braid::testing::error_of([&] {
              ask_accelerate_config(in, out);
            }).find("the input ended before an answer to 'How many different machines"),
            std::string::npos);
}

}  // namespace
}  // namespace braid::config
