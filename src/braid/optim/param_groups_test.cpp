#include "braid/optim/param_groups.h"

#include <gtest/gtest.h>

namespace braid::optim {
namespace {

ParamSlice param(const std::string& name, Shape shape) {
  return ParamSlice::whole(name, Tensor::zeros(shape), Tensor());
}

std::vector<std::string> names(const ParamGroup& g) {
  std::vector<std::string> out;
  for (const auto& p : g.params) out.push_back(p.name());
  return out;
}

TEST(ParamGroups, SplitsLikeNanoGptAndHf) {
  std::vector<ParamSlice> ps = {
      param("transformer.wte.weight", {50, 8}),
      param("transformer.h.0.ln_1.weight", {8}),
      param("transformer.h.0.attn.c_attn.weight", {24, 8}),
      param("transformer.h.0.attn.c_attn.bias", {24}),
      param("model.layers.0.input_layernorm.weight", {8}),
      param("model.norm.weight", {8}),
      param("scalar_gain", {1}),
  };
  auto groups = split_decay_groups(ps, {.weight_decay = 0.1f});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_FLOAT_EQ(groups[0].weight_decay, 0.1f);
  EXPECT_FLOAT_EQ(groups[1].weight_decay, 0.0f);
  EXPECT_EQ(names(groups[0]), (std::vector<std::string>{"transformer.wte.weight",
                                                        "transformer.h.0.attn.c_attn.weight"}));
  EXPECT_EQ(names(groups[1]),
            (std::vector<std::string>{
                "transformer.h.0.ln_1.weight", "transformer.h.0.attn.c_attn.bias",
                "model.layers.0.input_layernorm.weight", "model.norm.weight", "scalar_gain"}));
}

TEST(ParamGroups, ShardsUseTheFullShapeAndRulesAreConfigurable) {
  ParamSlice shard = param("h.0.mlp.c_fc.weight", {6});
  EXPECT_TRUE(is_no_decay(shard));
  shard.shard = {"h.0.mlp.c_fc.weight", Shape{32, 8}, 100, 6};  // a flat shard of a [32, 8] matrix
  EXPECT_FALSE(is_no_decay(shard));

  DecaySplitOptions opts;
  opts.no_decay_below_rank_2 = false;
  opts.no_decay_name_parts = {"wte"};
  EXPECT_TRUE(is_no_decay(param("transformer.wte.weight", {50, 8}), opts));
  EXPECT_FALSE(is_no_decay(param("h.0.attn.c_attn.bias", {24}), opts));
  opts.force_decay_name_parts = {"transformer.wte"};
  EXPECT_FALSE(is_no_decay(param("transformer.wte.weight", {50, 8}), opts));
}

}  // namespace
}  // namespace braid::optim
