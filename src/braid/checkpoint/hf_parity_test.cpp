// Parity with the PyTorch reference (tools/reference.py, golden data from tools/make_golden.py):
// import the tiny HF models, run the golden tokens, and compare the loss, the logits and the
// gradient of every parameter (HF names and layout), with and without activation
// checkpointing. The reference ran in float64, so the errors below are braid's f32 error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "braid/checkpoint/hf_model_io.h"
#include "braid/checkpoint/safetensors.h"

namespace braid::checkpoint {
namespace {

namespace fs = std::filesystem;

// max |a - b| / max |b|: the error relative to the tensor's scale (elementwise relative
// error is meaningless for entries that are nearly zero).
double scaled_error(const Tensor& actual, const Tensor& expected) {
  auto a = actual.to_f32_vector(), b = expected.to_f32_vector();
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (std::isnan(a[i])) d = INFINITY;
    num = std::max(num, d);
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return num / std::max(den, 1e-30);
}

struct ParityCase {
  const char* model;
  bool checkpointing;
};

class HfParityTest : public ::testing::TestWithParam<ParityCase> {};

TEST_P(HfParityTest, LossLogitsAndEveryGradientMatchTheReference) {
  const fs::path dir = fs::path(BRAID_TESTDATA_DIR) / GetParam().model;
  auto model = import_hf(dir);
  model->set_activation_checkpointing(GetParam().checkpointing);
  SafetensorsReader golden(dir / "golden.safetensors");
  const Tensor ids = golden.read("input_ids");
  const Tensor targets = golden.read("targets");
  const double want_loss = golden.read("loss").item();

  model->zero_grad();
  autograd::Variable loss = model->loss(ids, targets);
  const double got_loss = loss.value().item();
  const double loss_err = std::fabs(got_loss - want_loss) / std::fabs(want_loss);
  EXPECT_LE(loss_err, 1e-5) << "loss " << got_loss << " vs reference " << want_loss;
  loss.backward();

  double worst_grad = 0;
  std::string worst_name;
  for (const auto& t : hf_tensor_layout(*model)) {
    const Tensor got = to_hf_layout(*model, t, /*gradient=*/true);
    const Tensor want = golden.read("grad." + t.name);
    ASSERT_EQ(got.shape(), want.shape()) << t.name;
    const double err = scaled_error(got, want);
    EXPECT_LE(err, 1e-4) << "gradient of " << t.name;
    if (err >= worst_grad) {
      worst_grad = err;
      worst_name = t.name;
    }
  }

  const Tensor logits = model->logits(ids);
  const double logits_err = scaled_error(logits, golden.read("logits"));
  EXPECT_LE(logits_err, 1e-5);

  std::printf(
      "[parity] %s%s: loss rel err %.2e, logits max err/max|logit| %.2e, worst grad "
      "max err/max|grad| %.2e (%s)\n",
      GetParam().model, GetParam().checkpointing ? " +ckpt" : "", loss_err, logits_err, worst_grad,
      worst_name.c_str());
  RecordProperty("loss_rel_err", std::to_string(loss_err));
  RecordProperty("logits_err", std::to_string(logits_err));
  RecordProperty("worst_grad_err", std::to_string(worst_grad));
}

INSTANTIATE_TEST_SUITE_P(Golden, HfParityTest,
                         ::testing::Values(ParityCase{"gpt2-tiny", false},
                                           ParityCase{"gpt2-tiny", true},
                                           ParityCase{"llama-tiny", false},
                                           ParityCase{"llama-tiny", true}),
                         [](const auto& info) {
                           std::string n = info.param.model;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n + (info.param.checkpointing ? "_ckpt" : "");
                         });

}  // namespace
}  // namespace braid::checkpoint
