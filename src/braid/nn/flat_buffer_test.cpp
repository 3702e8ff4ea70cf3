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

// Units "body" = fc (16 elements, a multiple of the alignment) and "top" = norm + head.
ParamLayout layout_of(TwoLayers& m, int64_t pad = ParamLayout::kAlign) {
  return ParamLayout(m, {{"body", {m.fc}}, {"top", {m.norm, m.head}}}, pad);
}

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
  FlatBuffer fb(layout_of(m));
  const int64_t n = 12 + 4 + 4 + 4 + 8;
  EXPECT_EQ(m.num_parameters(), n);
  EXPECT_EQ(fb.numel(), 16 + 16);  // units padded to 16: body 16, top 16
  EXPECT_EQ(tracker->current(MemCategory::parameters), 4 * fb.numel());
  EXPECT_EQ(tracker->current(MemCategory::gradients), 4 * fb.numel());

  auto named = m.named_parameters();
  std::vector<std::string> names;
  for (auto& [name, v] : named) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"fc.weight", "fc.bias", "norm.weight", "norm.bias",
                                             "head.weight"}));
  const std::vector<int64_t> offsets = {0, 12, 16, 20, 24};
  for (size_t i = 0; i < named.size(); ++i) {
    auto& [name, v] = named[i];
    EXPECT_TRUE(v.value().shares_storage(fb.params())) << name;
    EXPECT_EQ(v.value().offset(), offsets[i]) << name;
    EXPECT_TRUE(v.grad().shares_storage(fb.grads())) << name;
    EXPECT_EQ(v.grad().offset(), offsets[i]) << name;
    EXPECT_EQ(v.name(), name);
  }
  EXPECT_EQ(fb.entry("head.weight").range, (FlatRange{24, 8}));
  EXPECT_EQ(fb.unit_range(1), (FlatRange{16, 16}));
  EXPECT_THROW(fb.entry("nope"), Error);
  EXPECT_EQ(m.find_module("norm"), m.norm);
  EXPECT_EQ(m.find_module("nope.x"), nullptr);

  // Writing through the flat buffer is visible through the parameter views.
  fb.params().data<float>()[16] = 7.0f;
  EXPECT_EQ(m.norm->named_parameters()[0].second.value().data<float>()[0], 7.0f);
  EXPECT_THROW(FlatBuffer again(layout_of(m)), Error);  // materialised once
}

TEST(ParamLayout, PadsUnitsAndChecksThatTheyTileTheParameters) {
  TwoLayers m;
  ParamLayout l = layout_of(m, 64);
  ASSERT_EQ(l.units().size(), 2u);
  EXPECT_EQ(l.units()[0].numel, 16);
  EXPECT_EQ(l.units()[1].numel, 16);
  EXPECT_EQ(l.units()[1].padded, 64);
  EXPECT_EQ(l.units()[1].offset, 64);
  EXPECT_EQ(l.total(), 128);
  EXPECT_EQ(l.num_parameters(), 32);
  EXPECT_EQ(l.param("head.weight").unit_offset, 8);
  EXPECT_EQ(l.param("head.weight").index, 4);
  EXPECT_EQ(l.flat_offset(l.param("head.weight")), 72);
  EXPECT_EQ(l.with_padding(16).total(), 32);
  EXPECT_THROW(l.param("nope"), Error);
  EXPECT_THROW(layout_of(m, 10), Error);                                  // not a multiple of 16
  EXPECT_THROW(ParamLayout(m, {{"a", {m.fc}}, {"b", {m.head}}}), Error);  // norm in no unit
  EXPECT_THROW(ParamLayout(m, {{"a", {m.fc, m.norm}}, {"b", {m.norm, m.head}}}),
               Error);  // norm in two units
  EXPECT_THROW(ParamLayout(m, {{"a", {m.fc, m.head}}, {"b", {m.norm}}}),
               Error);  // unit a is not contiguous
}

TEST(ParamLayout, BindsAndUnbindsAUnitsViews) {
  TwoLayers m;
  ParamLayout l = layout_of(m);
  Tensor p = Tensor::zeros(Shape{16}), g = Tensor::zeros(Shape{16});
  l.bind_unit(1, p, g);
  Variable& w = m.head->weight();
  EXPECT_TRUE(w.value().shares_storage(p));
  EXPECT_EQ(w.value().offset(), 8);
  EXPECT_TRUE(w.grad().shares_storage(g));
  l.unbind_unit(1);
  EXPECT_FALSE(w.value().defined());
  EXPECT_FALSE(w.grad().defined());
  Tensor p2 = Tensor::zeros(Shape{16});
  l.bind_unit(1, p2, Tensor());  // the same Variable again, no gradient
  EXPECT_TRUE(w.value().shares_storage(p2));
  EXPECT_FALSE(w.grad().defined());
  EXPECT_THROW(l.bind_unit(1, Tensor::zeros(Shape{8}), Tensor()), Error);  // too small
}

TEST(FlatBuffer, InitIsDeterministicAndFollowsParamInit) {
  TwoLayers a, b;
  FlatBuffer fa(layout_of(a)), fb(layout_of(b, 64));
  fa.init(42);
  fb.init(42);
  auto va = fa.params().to_f32_vector();
  for (const auto& e : fa.entries())  // the same values whatever the padding
    EXPECT_EQ(e.param->var.value().to_f32_vector(),
              fb.entry(e.name).param->var.value().to_f32_vector());
  const auto& bias = fa.entry("fc.bias").range;
  for (int64_t i = 0; i < bias.size; ++i) EXPECT_EQ(va[bias.offset + i], 0.0f);
  const auto& g = fa.entry("norm.weight").range;
  for (int64_t i = 0; i < g.size; ++i) EXPECT_EQ(va[g.offset + i], 1.0f);
  const auto& w = fa.entry("fc.weight").range;
  double sq = 0;
  for (int64_t i = 0; i < w.size; ++i) sq += va[w.offset + i] * va[w.offset + i];
  EXPECT_GT(sq, 0.0);
  EXPECT_LT(sq / w.size, 0.01);  // std 0.02
  fa.init(43);
  EXPECT_NE(fa.params().to_f32_vector(), va);
}

TEST(FlatBuffer, FrozenParametersKeepTheirRangeButGetNoGradient) {
  TwoLayers m;
  m.fc->set_requires_grad(false);
  FlatBuffer fb(layout_of(m));
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
