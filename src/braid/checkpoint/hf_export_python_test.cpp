// Export direction of the PyTorch parity (CTest label `python`): braid builds a model with
// non-trivial random weights, computes its loss and logits, exports the model as an HF
// directory, and tools/check_export.py loads that directory in the PyTorch reference and
// compares. Skipped when /usr/bin/python3 (or $BRAID_PYTHON) cannot import torch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "braid/checkpoint/hf_model_io.h"
#include "braid/checkpoint/safetensors.h"

namespace braid::checkpoint {
namespace {

namespace fs = std::filesystem;

std::string python() {
  const char* p = std::getenv("BRAID_PYTHON");
  return p ? p : "/usr/bin/python3";
}

bool python_has_torch() {
  const std::string cmd = python() + " -c 'import torch' > /dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

class HfExportPythonTest : public ::testing::TestWithParam<const char*> {};

TEST_P(HfExportPythonTest, ReferenceComputesTheSameLossFromTheExport) {
  if (!python_has_torch()) GTEST_SKIP() << python() << " cannot import torch";
  const fs::path dir =
      fs::temp_directory_path() / ("braid_export_" + std::to_string(::getpid()) + "_" + GetParam());
  fs::remove_all(dir);

  nn::ModelConfig cfg =
      nn::ModelConfig::from_hf_file(fs::path(BRAID_TESTDATA_DIR) / GetParam() / "config.json");
  nn::Transformer model(cfg, {.seed = 99});
  // Weights far from the init scale so every tensor (norms included) visibly matters.
  Rng rng(123);
  model.flat().params().copy_(Tensor::randn(Shape{model.flat().numel()}, rng, 0.3f));

  const int64_t B = 3, T = 7;
  std::vector<int32_t> ids(B * T), targets(B * T);
  for (auto& x : ids) x = static_cast<int32_t>(rng.below(static_cast<uint64_t>(cfg.vocab_size)));
  for (auto& x : targets)
    x = static_cast<int32_t>(rng.below(static_cast<uint64_t>(cfg.vocab_size)));
  targets[4] = -100;
  Tensor tids = Tensor::from_vector(ids, Shape{B, T});
  Tensor ttargets = Tensor::from_vector(targets, Shape{B, T});
  Tensor loss;
  {
    autograd::NoGradGuard no_grad;
    loss = model.loss(tids, ttargets).value();
  }
  Tensor logits = model.logits(tids);

  export_hf(model, dir / "model");
  save_safetensors(
      dir / "golden.safetensors",
      {{"input_ids", tids}, {"targets", ttargets}, {"loss", loss}, {"logits", logits}});
  const std::string cmd = python() + " " + BRAID_TOOLS_DIR + "/check_export.py " +
                          (dir / "model").string() + " " + (dir / "golden.safetensors").string();
  const int status = std::system(cmd.c_str());
  fs::remove_all(dir);
  ASSERT_TRUE(WIFEXITED(status)) << cmd;
  EXPECT_EQ(WEXITSTATUS(status), 0) << cmd << " reported a mismatch (output above)";
}

INSTANTIATE_TEST_SUITE_P(Models, HfExportPythonTest, ::testing::Values("gpt2-tiny", "llama-tiny"),
                         [](const auto& info) {
                           std::string n = info.param;
                           return n.substr(0, n.find('-'));
                         });

}  // namespace
}  // namespace braid::checkpoint
