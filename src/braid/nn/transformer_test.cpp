#include "braid/nn/transformer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "braid/optim/optimizer.h"
#include "testing/tensor_compare.h"

namespace braid::nn {
namespace {

ModelConfig tiny(ModelArch arch) {
  ModelConfig c = ModelConfig::preset(arch == ModelArch::gpt2 ? "gpt2-tiny" : "llama-tiny");
  c.vocab_size = 61;
  c.max_seq_len = 16;
  c.d_model = 32;
  c.d_ff = arch == ModelArch::gpt2 ? 128 : 48;
  c.n_layer = 3;
  return c;
}

Tensor tokens(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> v(static_cast<size_t>(B * T));
  for (auto& x : v) x = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
  return Tensor::from_vector(v, Shape{B, T});
}

class TransformerTest : public ::testing::TestWithParam<ModelArch> {};

TEST_P(TransformerTest, LayoutFollowsFirstUseAndUnitsTileTheBuffer) {
  const ModelConfig cfg = tiny(GetParam());
  Transformer m(cfg);
  EXPECT_EQ(m.layout().num_parameters(), cfg.num_parameters());
  EXPECT_EQ(m.flat().numel(), m.layout().total());
  const auto& e = m.flat().entries();
  if (cfg.is_gpt2()) {
    EXPECT_EQ(e.front().name, "transformer.wte.weight");
    EXPECT_EQ(e[1].name, "transformer.wpe.weight");
    EXPECT_EQ(e[2].name, "transformer.h.0.ln_1.weight");
    EXPECT_EQ(e[4].name, "transformer.h.0.attn.c_attn.weight");
    EXPECT_EQ(e[4].param->shape, (Shape{96, 32}));
    EXPECT_EQ(e.back().name, "transformer.ln_f.bias");
  } else {
    EXPECT_EQ(e.front().name, "model.embed_tokens.weight");
    EXPECT_EQ(e[1].name, "model.layers.0.input_layernorm.weight");
    EXPECT_EQ(e[3].name, "model.layers.0.self_attn.k_proj.weight");
    EXPECT_EQ(e[3].param->shape, (Shape{16, 32}));  // 2 kv heads of 8
    EXPECT_EQ(e.back().name, "lm_head.weight");
  }
  const auto& units = m.layout().units();
  ASSERT_EQ(units.size(), static_cast<size_t>(cfg.n_layer + 2));
  EXPECT_EQ(units[0].name, "embeddings");
  EXPECT_EQ(units[1].name, "block.0");
  EXPECT_EQ(units.back().name, "head");
  // Units follow each other, each 64-byte aligned and padded to the alignment; parameters are
  // contiguous inside their unit.
  int64_t at = 0;
  for (const auto& u : units) {
    EXPECT_EQ(u.offset, at) << u.name;
    EXPECT_EQ(u.offset % ParamLayout::kAlign, 0) << u.name;
    EXPECT_GE(u.padded, u.numel) << u.name;
    EXPECT_LT(u.padded - u.numel, ParamLayout::kAlign) << u.name;
    int64_t inside = 0;
    for (int i : u.params) {
      EXPECT_EQ(m.layout().params()[i].unit_offset, inside) << m.layout().params()[i].name;
      inside += m.layout().params()[i].numel;
    }
    EXPECT_EQ(inside, u.numel) << u.name;
    at += u.padded;
  }
  EXPECT_EQ(at, m.flat().numel());
  // The head is always a module; tied, it borrows the embeddings unit.
  EXPECT_EQ(m.lm_head().is_tied(), cfg.tie_word_embeddings);
  EXPECT_EQ(units[0].users.back() == &m.lm_head(), cfg.tie_word_embeddings);
}

TEST_P(TransformerTest, InitDoesNotDependOnPaddingOrMaterialisation) {
  const ModelConfig cfg = tiny(GetParam());
  Transformer a(cfg, {.seed = 5});
  Transformer b(cfg, {.seed = 5, .materialize = false});
  b.materialize(true, 4 * ParamLayout::kAlign);
  b.init_weights(5);
  for (const auto& e : a.flat().entries()) {
    EXPECT_TRUE(testing::bit_equal(e.param->var.value(), b.flat().entry(e.name).param->var.value()))
        << e.name;
  }
  // Unit by unit into a buffer of its own: the same values.
  const auto& layout = b.flat().layout();
  for (size_t u = 0; u < layout.units().size(); ++u) {
    Tensor unit = Tensor::zeros(Shape{layout.units()[u].padded});
    layout.init_unit(static_cast<int>(u), unit, 5);
    const FlatRange r = b.flat().unit_range(static_cast<int>(u));
    EXPECT_TRUE(testing::bit_equal(unit, b.flat().params().flat_range(r.offset, r.size)));
  }
  // Range by range, cut anywhere (inside parameters, across their ends, in the padding; Note
  // [Ranged loads]), each into a buffer of the range alone: the same values, padding zero, and
  // nothing outside the range written.
  for (size_t u = 0; u < layout.units().size(); ++u) {
    const int64_t n = layout.units()[u].padded;
    const FlatRange r = b.flat().unit_range(static_cast<int>(u));
    for (int64_t cuts : {2, 3, 7}) {
      Tensor unit = Tensor::full(Shape{n}, -1.0f);
      for (int64_t k = 0; k < cuts; ++k) {
        const int64_t begin = n * k / cuts, end = n * (k + 1) / cuts;
        Tensor guarded = Tensor::full(Shape{end - begin + 2}, -1.0f);  // a guard each side
        layout.init_unit_range(static_cast<int>(u), begin, end, guarded.flat_range(1, end - begin),
                               5);
        ASSERT_EQ(guarded.data<float>()[0], -1.0f);
        ASSERT_EQ(guarded.data<float>()[end - begin + 1], -1.0f);
        unit.flat_range(begin, end - begin).copy_(guarded.flat_range(1, end - begin));
      }
      EXPECT_TRUE(testing::bit_equal(unit, b.flat().params().flat_range(r.offset, r.size)))
          << "unit " << u << " in " << cuts;
    }
  }
}

TEST_P(TransformerTest, DeclaredModelHasNoStorageUntilMaterialised) {
  const ModelConfig cfg = tiny(GetParam());
  auto tracker = std::make_shared<MemoryTracker>();
  MemoryScope scope(tracker);
  Transformer m(cfg, {.materialize = false});
  EXPECT_EQ(tracker->current(MemCategory::parameters), 0);
  EXPECT_FALSE(m.is_materialized());
  EXPECT_THROW(m.flat(), Error);
  m.materialize(false);
  EXPECT_EQ(tracker->current(MemCategory::parameters), m.layout().total() * 4);
  EXPECT_THROW(m.materialize(false), Error);
}

TEST_P(TransformerTest, InitIsDeterministicGpt2Style) {
  const ModelConfig cfg = tiny(GetParam());
  Transformer a(cfg, {.seed = 5}), b(cfg, {.seed = 5}), c(cfg, {.seed = 6});
  EXPECT_TRUE(testing::bit_equal(a.flat().params(), b.flat().params()));
  EXPECT_FALSE(testing::bit_equal(a.flat().params(), c.flat().params()));
  const std::string proj = cfg.is_gpt2() ? "transformer.h.1.attn.c_proj.weight"
                                         : "model.layers.1.self_attn.o_proj.weight";
  auto v = a.flat().entry(proj).param->var.value().to_f32_vector();
  double sq = 0;
  for (float x : v) sq += x * x;
  const double want = 0.02 / std::sqrt(2.0 * cfg.n_layer);
  EXPECT_NEAR(std::sqrt(sq / v.size()), want, 0.15 * want);
}

TEST_P(TransformerTest, MemoryIsAccountedAndActivationsFreedAfterBackward) {
  auto tracker = std::make_shared<MemoryTracker>();
  MemoryScope scope(tracker);
  const ModelConfig cfg = tiny(GetParam());
  Transformer m(cfg);
  const int64_t n = cfg.num_parameters(), padded = m.layout().total();
  EXPECT_EQ(tracker->current(MemCategory::parameters), 4 * padded);
  EXPECT_EQ(tracker->current(MemCategory::gradients), 4 * padded);

  std::vector<optim::ParamSlice> slices;
  for (auto& [name, v] : m.named_parameters())
    slices.push_back(optim::ParamSlice::whole(name, v.value(), v.grad()));
  optim::AdamW opt({optim::ParamGroup{slices, 1.0f, 0.1f}});
  for (int step = 0; step < 2; ++step) {
    Tensor ids = tokens(2, 8, cfg.vocab_size, 1 + step), tg = tokens(2, 8, cfg.vocab_size, 9);
    m.zero_grad();
    {
      Variable loss = m.loss(ids, tg);
      EXPECT_GT(tracker->current(MemCategory::activations), 0);
      loss.backward();
    }
    EXPECT_EQ(tracker->current(MemCategory::activations), 0) << tracker->breakdown();
    opt.step(1e-3f);
  }
  EXPECT_EQ(tracker->current(MemCategory::parameters), 4 * padded);
  EXPECT_EQ(tracker->current(MemCategory::gradients), 4 * padded);
  EXPECT_EQ(tracker->current(MemCategory::optimizer_state), 8 * n);
}

// One forward and backward of a fresh seed-3 model under `policy`.
struct StepResult {
  float loss = 0;
  Tensor grads;  // the whole flat gradient buffer
  int64_t peak_activations = 0;
  std::vector<int> hook_calls;  // per parameter, post-accumulate hooks in this backward
};

StepResult one_step(const ModelConfig& cfg, const CheckpointPolicy& policy) {
  auto tracker = std::make_shared<MemoryTracker>();
  MemoryScope scope(tracker);
  Transformer m(cfg, {.seed = 3});
  m.set_activation_checkpointing(policy);
  EXPECT_EQ(m.activation_checkpointing(), policy);
  StepResult r;
  auto params = m.named_parameters();
  r.hook_calls.assign(params.size(), 0);
  for (size_t i = 0; i < params.size(); ++i)
    params[i].second.register_post_accumulate_hook([&r, i](Variable&) { ++r.hook_calls[i]; });
  Tensor ids = tokens(4, 16, cfg.vocab_size, 1), tg = tokens(4, 16, cfg.vocab_size, 2);
  tracker->reset_peaks();
  {
    Variable loss = m.loss(ids, tg);
    r.loss = loss.value().item();
    loss.backward();
  }
  r.peak_activations = tracker->peak(MemCategory::activations);
  EXPECT_EQ(tracker->current(MemCategory::activations), 0)
      << policy.str() << ": " << tracker->breakdown();
  r.grads = m.flat().grads().clone();
  return r;
}

TEST_P(TransformerTest, CheckpointPoliciesGiveBitIdenticalGradientsWithLessMemory) {
  using Kind = CheckpointPolicy::Kind;
  const ModelConfig cfg = tiny(GetParam());  // 3 blocks: every 2nd is blocks 0 and 2
  const StepResult none = one_step(cfg, {});
  std::map<std::string, int64_t> peak;
  for (const CheckpointPolicy& policy :
       {CheckpointPolicy(Kind::full), CheckpointPolicy(Kind::full, 2),
        CheckpointPolicy(Kind::selective), CheckpointPolicy(Kind::selective, 2)}) {
    const StepResult r = one_step(cfg, policy);
    EXPECT_EQ(r.loss, none.loss) << policy.str();
    EXPECT_TRUE(testing::bit_equal(r.grads, none.grads)) << policy.str();
    EXPECT_EQ(r.hook_calls, std::vector<int>(r.hook_calls.size(), 1)) << policy.str();
    peak[policy.str()] = r.peak_activations;
  }
  EXPECT_EQ(none.hook_calls, std::vector<int>(none.hook_calls.size(), 1));
  // none > selective > full, and every other block lies between none and every block.
  EXPECT_GT(none.peak_activations, peak["selective"]);
  EXPECT_GT(peak["selective"], peak["full"]);
  EXPECT_GT(none.peak_activations, peak["selective every 2"]);
  EXPECT_GT(peak["selective every 2"], peak["selective"]);
  EXPECT_GT(none.peak_activations, peak["full every 2"]);
  EXPECT_GT(peak["full every 2"], peak["full"]);
}

TEST_P(TransformerTest, CheckpointPolicyFromTheOldBoolAndInTheConfig) {
  ModelConfig cfg = tiny(GetParam());
  cfg.activation_checkpointing = true;
  Transformer m(cfg, {.seed = 3});
  EXPECT_EQ(m.activation_checkpointing(), CheckpointPolicy(CheckpointPolicy::Kind::full));
  m.set_activation_checkpointing(false);
  EXPECT_FALSE(m.activation_checkpointing().is_enabled());
  EXPECT_THROW(m.set_activation_checkpointing({CheckpointPolicy::Kind::full, 0}), Error);
  cfg.activation_checkpointing = {CheckpointPolicy::Kind::selective, -1};
  EXPECT_THROW(Transformer(cfg, {.seed = 3}), Error);
}

TEST_P(TransformerTest, LogitsAgreeWithTheLossAndDenominatorScales) {
  const ModelConfig cfg = tiny(GetParam());
  Transformer m(cfg, {.seed = 11});
  const int64_t B = 2, T = 5, V = cfg.vocab_size;
  Tensor ids = tokens(B, T, V, 4), tg = tokens(B, T, V, 8);
  tg.data<int32_t>()[3] = -100;
  Tensor logits = m.logits(ids);
  ASSERT_EQ(logits.shape(), (Shape{B, T, V}));
  const float* lg = logits.data<float>();
  double sum = 0;
  int count = 0;
  for (int64_t r = 0; r < B * T; ++r) {
    const int32_t t = tg.data<int32_t>()[r];
    if (t == -100) continue;
    double mx = -1e30, se = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(lg[r * V + v]));
    for (int64_t v = 0; v < V; ++v) se += std::exp(lg[r * V + v] - mx);
    sum += mx + std::log(se) - lg[r * V + t];
    ++count;
  }
  autograd::NoGradGuard no_grad;
  EXPECT_NEAR(m.loss(ids, tg).value().item(), sum / count, 1e-5 * sum / count);
  EXPECT_NEAR(m.loss(ids, tg, 4.0 * count).value().item(), sum / count / 4, 1e-5 * sum / count);
}

TEST_P(TransformerTest, HooksFireAroundForwardAndBackward) {
  const ModelConfig cfg = tiny(GetParam());
  Transformer m(cfg, {.seed = 1});
  std::vector<std::string> events;
  for (size_t i = 0; i < m.num_blocks(); ++i) {
    const std::string id = std::to_string(i);
    Block& b = m.block(i);
    b.register_forward_pre_hook([&events, id](Module&) { events.push_back("fpre" + id); });
    b.register_forward_post_hook(
        [&events, id](Module&, const Variable&) { events.push_back("fpost" + id); });
    b.register_backward_pre_hook([&events, id](Module&) { events.push_back("bpre" + id); });
    b.register_backward_post_hook([&events, id](Module&) { events.push_back("bpost" + id); });
  }
  for (int rep = 0; rep < 2; ++rep) {
    events.clear();
    Tensor ids = tokens(1, 4, cfg.vocab_size, 1);
    m.zero_grad();
    Variable loss = m.loss(ids, ids);
    EXPECT_EQ(events,
              (std::vector<std::string>{"fpre0", "fpost0", "fpre1", "fpost1", "fpre2", "fpost2"}));
    events.clear();
    loss.backward();
    EXPECT_EQ(events,
              (std::vector<std::string>{"bpre2", "bpost2", "bpre1", "bpost1", "bpre0", "bpost0"}));
  }
}

TEST_P(TransformerTest, HooksUnderActivationCheckpointingFireAgainOnTheRerun) {
  ModelConfig cfg = tiny(GetParam());
  cfg.activation_checkpointing = true;
  Transformer m(cfg, {.seed = 1});
  std::vector<std::string> events;
  for (size_t i = 0; i < m.num_blocks(); ++i) {
    const std::string id = std::to_string(i);
    Block& b = m.block(i);
    b.register_forward_pre_hook([&events, id](Module&) { events.push_back("fpre" + id); });
    b.register_backward_pre_hook([&events, id](Module&) { events.push_back("bpre" + id); });
    b.register_backward_post_hook([&events, id](Module&) { events.push_back("bpost" + id); });
  }
  Tensor ids = tokens(1, 4, cfg.vocab_size, 1);
  Variable loss = m.loss(ids, ids);
  EXPECT_EQ(events, (std::vector<std::string>{"fpre0", "fpre1", "fpre2"}));
  events.clear();
  loss.backward();
  EXPECT_EQ(events, (std::vector<std::string>{"fpre2", "bpre2", "bpost2", "fpre1", "bpre1",
                                              "bpost1", "fpre0", "bpre0", "bpost0"}));
}

TEST_P(TransformerTest, HooksUnderSelectiveCheckpointingFireOnceAndTheAttentionRerunsInBackward) {
  ModelConfig cfg = tiny(GetParam());
  cfg.activation_checkpointing = CheckpointPolicy::Kind::selective;
  Transformer m(cfg, {.seed = 1});
  std::vector<std::string> events;
  for (size_t i = 0; i < m.num_blocks(); ++i) {
    const std::string id = std::to_string(i);
    Block& b = m.block(i);
    b.register_forward_pre_hook([&events, id](Module&) { events.push_back("fpre" + id); });
    b.register_backward_pre_hook([&events, id](Module&) { events.push_back("bpre" + id); });
    b.register_backward_post_hook([&events, id](Module&) { events.push_back("bpost" + id); });
    b.find_module(cfg.is_gpt2() ? "attn" : "self_attn")
        ->register_forward_pre_hook([&events, id](Module&) { events.push_back("attn" + id); });
  }
  for (int rep = 0; rep < 2; ++rep) {
    events.clear();
    m.zero_grad();
    Tensor ids = tokens(1, 4, cfg.vocab_size, 1);
    Variable loss = m.loss(ids, ids);
    EXPECT_EQ(events,
              (std::vector<std::string>{"fpre0", "attn0", "fpre1", "attn1", "fpre2", "attn2"}));
    events.clear();
    loss.backward();
    // The block itself is not rerun: its hooks fire once; the attention's forward runs again
    // inside the block's backward (between bpre and bpost, where FSDP holds the parameters).
    EXPECT_EQ(events, (std::vector<std::string>{"bpre2", "attn2", "bpost2", "bpre1", "attn1",
                                                "bpost1", "bpre0", "attn0", "bpost0"}));
  }
}

TEST(CheckpointPolicy, ParsesConfigValuesAndRejectsOthers) {
  using Kind = CheckpointPolicy::Kind;
  EXPECT_EQ(CheckpointPolicy::parse("none"), CheckpointPolicy());
  EXPECT_EQ(CheckpointPolicy::parse("false"), CheckpointPolicy());
  EXPECT_EQ(CheckpointPolicy::parse("full"), CheckpointPolicy(Kind::full));
  EXPECT_EQ(CheckpointPolicy::parse("true"), CheckpointPolicy(Kind::full));
  EXPECT_EQ(CheckpointPolicy::parse("selective", 2), CheckpointPolicy(Kind::selective, 2));
  EXPECT_EQ(CheckpointPolicy::parse("selective", 2).str(), "selective every 2");
  EXPECT_EQ(CheckpointPolicy::parse("full").str(), "full");
  EXPECT_EQ(CheckpointPolicy(true), CheckpointPolicy(Kind::full));
  EXPECT_EQ(CheckpointPolicy(false), CheckpointPolicy());
  const CheckpointPolicy every3(Kind::full, 3);
  EXPECT_TRUE(every3.applies_to(0));
  EXPECT_FALSE(every3.applies_to(1));
  EXPECT_TRUE(every3.applies_to(3));
  EXPECT_FALSE(CheckpointPolicy().applies_to(0));
  for (const char* bad : {"partial", "", "Full", "selective:2", "1"}) {
    try {
      CheckpointPolicy::parse(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'" + std::string(bad) + "'"), std::string::npos)
          << e.what();
    }
  }
  for (int64_t bad : {0, -2}) {
    try {
      CheckpointPolicy::parse("selective", bad);
      ADD_FAILURE() << "accepted interval " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("got " + std::to_string(bad)), std::string::npos)
          << e.what();
    }
  }
}

TEST_P(TransformerTest, FrozenEmbeddingsGetNoGradient) {
  const ModelConfig cfg = tiny(GetParam());
  Transformer m(cfg, {.seed = 2});
  m.find_module(cfg.is_gpt2() ? "transformer.wte" : "model.embed_tokens")->set_requires_grad(false);
  if (cfg.is_gpt2()) m.find_module("transformer.wpe")->set_requires_grad(false);
  Tensor ids = tokens(2, 6, cfg.vocab_size, 3);
  m.loss(ids, ids).backward();
  const FlatRange emb = m.flat().unit_range(0);
  auto g = m.flat().grads().to_f32_vector();
  double frozen = 0, trained = 0;
  for (int64_t i = 0; i < m.flat().numel(); ++i) {
    (i < emb.end() ? frozen : trained) += std::fabs(g[static_cast<size_t>(i)]);
  }
  EXPECT_EQ(frozen, 0.0);
  EXPECT_GT(trained, 0.0);
}

TEST_P(TransformerTest, RejectsBadInputs) {
  const ModelConfig cfg = tiny(GetParam());
  Transformer m(cfg);
  Tensor ok = tokens(1, 4, cfg.vocab_size, 1);
  EXPECT_THROW(m.loss(Tensor::zeros(Shape{1, 4}), ok), Error);                         // f32 ids
  EXPECT_THROW(m.loss(tokens(1, 17, cfg.vocab_size, 1), tokens(1, 17, 5, 1)), Error);  // T > 16
  EXPECT_THROW(m.loss(ok, tokens(1, 3, cfg.vocab_size, 1)), Error);                    // shapes
}

INSTANTIATE_TEST_SUITE_P(Arch, TransformerTest,
                         ::testing::Values(ModelArch::gpt2, ModelArch::llama),
                         [](const auto& info) {
                           return info.param == ModelArch::gpt2 ? "gpt2" : "llama";
                         });

}  // namespace
}  // namespace braid::nn
