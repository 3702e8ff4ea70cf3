#include "braid/nn/flat_buffer.h"

#include <gtest/gtest.h>

#include "braid/nn/layer_norm.h"
#include "braid/nn/linear.h"

namespace braid::nn {
namespace {

class TwoLayers : public Module {
 public:
  TwoLayers() {
    fc = register_module("fc", std::make_unique<Linear>(3, 4, true));
    norm = register_module("norm", std::make_unique<LayerNorm>(4, 1e-5f));
    head = register_module("head", std::make_unique<Linear>(4, 2, false));
  }
  Linear* fc;
  LayerNorm* norm;
  Linear* head;
};

TEST(PaddedShards, SplitsIntoEqualPaddedSlices) {
  auto s = padded_shards({100, 10}, 4);  // per rank ceil(10/4) = 3
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0], (ShardRange{100, 3, 3}));
  EXPECT_EQ(s[1], (ShardRange{103, 3, 3}));
  EXPECT_EQ(s[2], (ShardRange{106, 3, 3}));
  EXPECT_EQ(s[3], (ShardRange{109, 1, 3}));
  auto t = padded_shards({0, 2}, 4);  // more ranks than elements
  EXPECT_EQ(t[1], (ShardRange{1, 1, 1}));
  EXPECT_EQ(t[2], (ShardRange{2, 0, 1}));
  EXPECT_EQ(t[3], (ShardRange{2, 0, 1}));
  auto u = padded_shards({5, 12}, 3);
  int64_t covered = 0;
  for (const auto& r : u) covered += r.size;
  EXPECT_EQ(covered, 12);
  EXPECT_THROW(padded_shards({0, 4}, 0), Error);
}

TEST(FlatBuffer, MaterialisesParametersAsViewsInDeclarationOrder) {
  auto tracker = std::make_shared<MemoryTracker>();
  MemoryScope scope(tracker);
  TwoLayers m;
  FlatBuffer fb(m);
  const int64_t n = 12 + 4 + 4 + 4 + 8;
  EXPECT_EQ(fb.numel(), n);
  EXPECT_EQ(m.num_parameters(), n);
  EXPECT_EQ(tracker->current(MemCategory::parameters), 4 * n);
  EXPECT_EQ(tracker->current(MemCategory::gradients), 4 * n);

  auto named = m.named_parameters();
  std::vector<std::string> names;
  for (auto& [name, v] : named) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"fc.weight", "fc.bias", "norm.weight", "norm.bias",
                                             "head.weight"}));
  int64_t offset = 0;
  for (auto& [name, v] : named) {
    EXPECT_TRUE(v.value().shares_storage(fb.params())) << name;
    EXPECT_EQ(v.value().offset(), offset) << name;
    EXPECT_TRUE(v.grad().shares_storage(fb.grads())) << name;
    EXPECT_EQ(v.grad().offset(), offset) << name;
    EXPECT_EQ(v.name(), name);
    offset += v.value().numel();
  }
  EXPECT_EQ(fb.entry("head.weight").range, (FlatRange{24, 8}));
  EXPECT_EQ(fb.range_of({m.norm, m.head}), (FlatRange{16, 16}));
  EXPECT_THROW(fb.range_of({m.fc, m.head}), Error);  // not contiguous
  EXPECT_THROW(fb.entry("nope"), Error);
  EXPECT_EQ(m.find_module("norm"), m.norm);
  EXPECT_EQ(m.find_module("nope.x"), nullptr);

  // Writing through the flat buffer is visible through the parameter views.
  fb.params().data<float>()[16] = 7.0f;
  EXPECT_EQ(m.norm->named_parameters()[0].second.value().data<float>()[0], 7.0f);
  EXPECT_THROW(FlatBuffer again(m), Error);  // materialised once
}

TEST(FlatBuffer, InitIsDeterministicAndFollowsParamInit) {
  TwoLayers a, b;
  FlatBuffer fa(a), fb(b);
  fa.init(42);
  fb.init(42);
  auto va = fa.params().to_f32_vector(), vb = fb.params().to_f32_vector();
  EXPECT_EQ(va, vb);
  const auto& bias = fa.entry("fc.bias").range;
  for (int64_t i = 0; i < bias.size; ++i) EXPECT_EQ(va[bias.offset + i], 0.0f);
  const auto& g = fa.entry("norm.weight").range;
  for (int64_t i = 0; i < g.size; ++i) EXPECT_EQ(va[g.offset + i], 1.0f);
  const auto& w = fa.entry("fc.weight").range;
  double sq = 0;
  for (int64_t i = 0; i < w.size; ++i) sq += va[w.offset + i] * va[w.offset + i];
  EXPECT_GT(sq, 0.0);
  EXPECT_LT(sq / w.size, 0.01);  // std 0.02
  fb.init(43);
  EXPECT_NE(fb.params().to_f32_vector(), va);
}

TEST(FlatBuffer, FrozenParametersKeepTheirRangeButGetNoGradient) {
  TwoLayers m;
  m.fc->set_requires_grad(false);
  FlatBuffer fb(m);
  EXPECT_EQ(fb.numel(), 32);
  auto named = m.named_parameters();
  EXPECT_FALSE(named[0].second.requires_grad());
  EXPECT_FALSE(named[0].second.grad().defined());
  EXPECT_TRUE(named[2].second.requires_grad());
  EXPECT_EQ(named[2].second.grad().offset(), 16);
}

TEST(Module, NamedParametersNeedMaterialisation) {
  TwoLayers m;
  EXPECT_THROW(m.named_parameters(), Error);
  EXPECT_EQ(m.named_parameter_slots().size(), 5u);
  auto mods = m.named_modules();
  ASSERT_EQ(mods.size(), 4u);
  EXPECT_EQ(mods[0].first, "");
  EXPECT_EQ(mods[3].first, "head");
  m.eval();
  EXPECT_FALSE(m.head->is_training());
  m.train();
  EXPECT_TRUE(m.head->is_training());
}

}  // namespace
}  // namespace braid::nn
