// Sampling stops where HF's generate does: at the model config's eos_token_id, or, for a config
// without one, at the tokenizer's <|endoftext|>.
#include "braid/train/generate.h"

#include <gtest/gtest.h>

namespace braid::train {
namespace {

// Logits that make token `(position * 3) % V` the greedy choice at each position.
LastLogits counting(int64_t V) {
  return [V](const Tensor& ids) {
    Tensor l = Tensor::zeros(Shape{1, V});
    l.data<float>()[(ids.shape()[1] * 3) % V] = 1.0f;
    return l;
  };
}

TEST(Generate, StopsAfterTheStopTokenAndOnlyThere) {
  SampleOptions o;
  o.temperature = 0;
  o.max_new_tokens = 10;
  Rng rng(1);
  o.stop_token = 9;  // positions 1, 2, 3 give 3, 6, 9
  EXPECT_EQ(sample(counting(16), 64, 16, {5}, o, rng), (std::vector<int32_t>{5, 3, 6, 9}));
  o.stop_token = -1;
  EXPECT_EQ(sample(counting(16), 64, 16, {5}, o, rng).size(), 11u);
}

TEST(Generate, TheStopTokenIsTheModelsEosAsInHfGenerate) {
  nn::ModelConfig llama;
  llama.eos_token_id = 2;
  EXPECT_EQ(stop_token_of(llama, 50256), 2);  // not the GPT-2 tokenizer's <|endoftext|>
  nn::ModelConfig none;
  none.eos_token_id = -1;
  EXPECT_EQ(stop_token_of(none, 50256), 50256);
  EXPECT_EQ(stop_token_of(none, -1), -1);
}

}  // namespace
}  // namespace braid::train
