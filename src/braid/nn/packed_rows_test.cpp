// Note [Packed rows] (sequence_layout.h): a batch of rows that each pack several examples gives
// the loss and every parameter gradient of those examples run one by one, for GPT-2 (learned
// positions) and LLaMA (RoPE, GQA), with and without activation checkpointing; bad positions
// are named.
#include "braid/nn/sequence_layout.h"

#include <gtest/gtest.h>

#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/nn/transformer.h"

namespace braid::nn {
namespace {

// The presets at 2 layers, 16 positions and a 61-token vocabulary (a prime: no padding luck).
ModelConfig tiny(ModelArch arch) {
  ModelConfig c = ModelConfig::preset(arch == ModelArch::gpt2 ? "gpt2-tiny" : "llama-tiny");
  c.n_layer = 2;
  c.max_seq_len = 16;
  c.vocab_size = 61;
  return c;
}

struct Result {
  double loss = 0;
  std::vector<float> grads;
};

// Two rows of 16: examples of 5, 7 and 4 tokens, then 9 and 7; about a third of the targets
// ignored, as a prompt's are.
const std::vector<std::vector<int64_t>> kExamples = {{5, 7, 4}, {9, 7}};
constexpr int64_t kT = 16;

class PackedRows : public ::testing::TestWithParam<std::tuple<ModelArch, const char*>> {
 protected:
  void SetUp() override {
    cfg_ = tiny(std::get<0>(GetParam()));
    cfg_.activation_checkpointing = CheckpointPolicy::parse(std::get<1>(GetParam()));
    Rng rng(3);
    ids_.resize(2 * kT);
    targets_.resize(2 * kT);
    for (size_t i = 0; i < ids_.size(); ++i) {
      ids_[i] = static_cast<int32_t>(rng.below(61));
      targets_[i] = rng.below(3) == 0 ? -100 : static_cast<int32_t>(rng.below(61));
    }
  }

  Result run(const std::function<double(Transformer&)>& forward_backward) {
    Transformer m(cfg_, {.seed = 11});
    m.zero_grad();
    Result r;
    r.loss = forward_backward(m);
    r.grads = m.flat().grads().to_f32_vector();
    return r;
  }

  ModelConfig cfg_;
  std::vector<int32_t> ids_, targets_;
};

TEST_P(PackedRows, GiveTheLossAndGradientsOfTheExamplesRunAlone) {
  std::vector<int32_t> pos;
  for (const auto& row : kExamples)
    for (int64_t len : row)
      for (int64_t t = 0; t < len; ++t) pos.push_back(static_cast<int32_t>(t));
  const Result packed = run([&](Transformer& m) {
    m.set_packed_positions(Tensor::from_vector(pos, Shape{2, kT}));
    Variable loss = m.loss(Tensor::from_vector(ids_, Shape{2, kT}),
                           Tensor::from_vector(targets_, Shape{2, kT}), 1.0);
    loss.backward();
    m.set_packed_positions(Tensor());
    return loss.value().item();
  });
  const Result alone = run([&](Transformer& m) {
    double sum = 0;
    for (size_t r = 0; r < kExamples.size(); ++r) {
      int64_t begin = 0;
      for (int64_t len : kExamples[r]) {
        const auto at = static_cast<ptrdiff_t>(static_cast<int64_t>(r) * kT + begin);
        std::vector<int32_t> ids(ids_.begin() + at, ids_.begin() + at + len);
        std::vector<int32_t> tg(targets_.begin() + at, targets_.begin() + at + len);
        Variable loss = m.loss(Tensor::from_vector(ids, Shape{1, len}),
                               Tensor::from_vector(tg, Shape{1, len}), 1.0);
        loss.backward();
        sum += loss.value().item();
        begin += len;
      }
    }
    return sum;
  });
  EXPECT_NEAR(packed.loss, alone.loss, 1e-5 * alone.loss);
  ASSERT_EQ(packed.grads.size(), alone.grads.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < alone.grads.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(packed.grads[i] - alone.grads[i])));
    scale = std::max(scale, static_cast<double>(std::abs(alone.grads[i])));
  }
  EXPECT_LT(worst, 1e-5 * scale) << "largest gradient difference " << worst << " of " << scale;
  // Without the layout the rows attend across their examples: a different loss.
  const Result plain = run([&](Transformer& m) {
    Variable loss = m.loss(Tensor::from_vector(ids_, Shape{2, kT}),
                           Tensor::from_vector(targets_, Shape{2, kT}), 1.0);
    loss.backward();
    return loss.value().item();
  });
  EXPECT_GT(std::abs(plain.loss - alone.loss), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Models, PackedRows,
                         ::testing::Combine(::testing::Values(ModelArch::gpt2, ModelArch::llama),
                                            ::testing::Values("none", "full", "selective")),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) == ModelArch::gpt2
                                                  ? "gpt2_"
                                                  : "llama_") +
                                  std::get<1>(info.param);
                         });

TEST(SequenceLayout, SegmentsFollowThePositionsAndBadOnesAreNamed) {
  auto l = SequenceLayout::from_positions(
      Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 0, 0, 1, 0, 1}, Shape{2, 4}));
  ASSERT_EQ(l->segments.size(), 4u);
  EXPECT_EQ(l->segments[1].row, 0);
  EXPECT_EQ(l->segments[1].begin, 3);
  EXPECT_EQ(l->segments[1].end, 4);
  EXPECT_EQ(l->segments[2].begin, 0);
  EXPECT_EQ(l->segments[2].end, 2);
  auto expect_error = [](std::vector<int32_t> p, const std::string& want) {
    try {
      SequenceLayout::from_positions(Tensor::from_vector(p, Shape{1, 4}));
      ADD_FAILURE() << "no error: " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  expect_error({0, 1, 3, 4}, "row 0 position 2 is 3, expected 0 (an example begins) or 2");
  expect_error({1, 2, 3, 4}, "row 0 begins at position 1");
}

}  // namespace
}  // namespace braid::nn
