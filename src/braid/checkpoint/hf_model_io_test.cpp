#include "braid/checkpoint/hf_model_io.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "braid/checkpoint/safetensors.h"
#include "testing/tensor_compare.h"

namespace braid::checkpoint {
namespace {

namespace fs = std::filesystem;

const fs::path kGpt2 = fs::path(BRAID_TESTDATA_DIR) / "gpt2-tiny";
const fs::path kLlama = fs::path(BRAID_TESTDATA_DIR) / "llama-tiny";

class HfModelIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("braid_hf_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A copy of `src`'s config with its tensors passed through `edit` (name -> tensor map).
  fs::path edited_copy(
      const fs::path& src,
      const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit) {
    fs::path out = dir_ / "edited";
    fs::create_directories(out);
    fs::copy_file(src / "config.json", out / "config.json", fs::copy_options::overwrite_existing);
    SafetensorsReader r(src / "model.safetensors");
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& e : r.entries()) tensors.emplace_back(e.name, r.read(e.name));
    edit(tensors);
    save_safetensors(out / "model.safetensors", tensors);
    return out;
  }

  static std::string import_error(const fs::path& dir) {
    try {
      import_hf(dir);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(HfModelIoTest, ExportReproducesTheHfFilesExactly) {
  for (const fs::path& src : {kGpt2, kLlama}) {
    auto model = import_hf(src);
    export_hf(*model, dir_ / "out");
    SafetensorsReader original(src / "model.safetensors"),
        exported(dir_ / "out" / "model.safetensors");
    EXPECT_EQ(exported.entries().size(), original.entries().size()) << src;
    for (const auto& e : original.entries()) {
      EXPECT_TRUE(testing::bit_equal(exported.read(e.name), original.read(e.name)))
          << src << ": " << e.name;
    }
    auto back = import_hf(dir_ / "out");
    EXPECT_TRUE(testing::bit_equal(back->flat().params(), model->flat().params()));
    EXPECT_EQ(back->config().to_hf_json(), model->config().to_hf_json());
  }
}

TEST_F(HfModelIoTest, Gpt2ConvWeightsAreTransposed) {
  auto model = import_hf(kGpt2);
  SafetensorsReader r(kGpt2 / "model.safetensors");
  Tensor hf = r.read("transformer.h.0.attn.c_attn.weight");  // [C, 3C]
  ASSERT_EQ(hf.shape(), (Shape{32, 96}));
  Tensor mine = model->flat().entry("transformer.h.0.attn.c_attn.weight").param->var.value();
  ASSERT_EQ(mine.shape(), (Shape{96, 32}));
  EXPECT_EQ(mine.data<float>()[5 * 32 + 7], hf.data<float>()[7 * 96 + 5]);
}

TEST_F(HfModelIoTest, Bf16ExportRoundsEveryWeight) {
  auto model = import_hf(kLlama);
  export_hf(*model, dir_ / "bf16", {DType::bf16});
  SafetensorsReader r(dir_ / "bf16" / "model.safetensors");
  EXPECT_EQ(r.entry("lm_head.weight").dtype, DType::bf16);
  auto back = import_hf(dir_ / "bf16");
  EXPECT_TRUE(testing::bit_equal(back->flat().params(),
                                 model->flat().params().to(DType::bf16).to(DType::f32)));
}

TEST_F(HfModelIoTest, AcceptsTiedHeadsPrefixlessNamesAndMaskBuffers) {
  auto ref = import_hf(kGpt2);
  fs::path d = edited_copy(kGpt2, [](auto& t) {
    Tensor wte;
    for (auto& [name, x] : t) {
      if (name == "transformer.wte.weight") wte = x;
      name = name.substr(std::string("transformer.").size());  // GPT2Model naming
    }
    t.emplace_back("lm_head.weight", wte);
    t.emplace_back("h.0.attn.bias", Tensor::zeros(Shape{1, 1, 16, 16}));
    t.emplace_back("h.1.attn.masked_bias", Tensor::zeros(Shape{1}));
  });
  auto model = import_hf(d);
  EXPECT_TRUE(testing::bit_equal(model->flat().params(), ref->flat().params()));
}

TEST_F(HfModelIoTest, MissingExtraAndMisShapedTensorsAreNamed) {
  std::string msg = import_error(edited_copy(kLlama, [](auto& t) {
    std::erase_if(t, [](const auto& p) { return p.first == "model.layers.1.mlp.up_proj.weight"; });
  }));
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'model.layers.1.mlp.up_proj.weight'"), std::string::npos) << msg;

  msg = import_error(edited_copy(kLlama, [](auto& t) {
    t.emplace_back("model.layers.2.mlp.up_proj.weight", Tensor::zeros(Shape{2}));
  }));
  EXPECT_NE(msg.find("unexpected"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'model.layers.2.mlp.up_proj.weight'"), std::string::npos) << msg;

  msg = import_error(edited_copy(kGpt2, [](auto& t) {
    for (auto& [name, x] : t) {
      if (name == "transformer.h.1.mlp.c_fc.weight") x = Tensor::zeros(Shape{128, 32});
    }
  }));
  EXPECT_NE(msg.find("'transformer.h.1.mlp.c_fc.weight' has shape [128, 32], expected [32, 128]"),
            std::string::npos)
      << msg;

  fs::create_directories(dir_ / "empty");
  fs::copy_file(kGpt2 / "config.json", dir_ / "empty" / "config.json");
  msg = import_error(dir_ / "empty");
  EXPECT_NE(msg.find("neither model.safetensors"), std::string::npos) << msg;
}

TEST_F(HfModelIoTest, ReadsShardedCheckpoints) {
  SafetensorsReader r(kLlama / "model.safetensors");
  fs::path d = dir_ / "sharded";
  fs::create_directories(d);
  fs::copy_file(kLlama / "config.json", d / "config.json");
  std::vector<std::pair<std::string, Tensor>> a, b;
  std::string index = R"({"metadata": {}, "weight_map": {)";
  for (size_t i = 0; i < r.entries().size(); ++i) {
    const auto& name = r.entries()[i].name;
    const char* file =
        i % 2 ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
    (i % 2 ? b : a).emplace_back(name, r.read(name));
    index += (i ? ", \"" : "\"") + name + "\": \"" + file + "\"";
  }
  index += "}}";
  save_safetensors(d / "model-00001-of-00002.safetensors", a);
  save_safetensors(d / "model-00002-of-00002.safetensors", b);
  std::ofstream(d / "model.safetensors.index.json") << index;
  auto sharded = import_hf(d);
  auto single = import_hf(kLlama);
  EXPECT_TRUE(testing::bit_equal(sharded->flat().params(), single->flat().params()));
}

}  // namespace
}  // namespace braid::checkpoint
