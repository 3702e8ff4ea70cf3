// Tensor parallelism against one process (Note [Tensor-parallel layout]): the same seed gives
// the same model whatever tp is, and the loss and every parameter's gradient of a tp-split
// model equal one process's (fp32 tolerance), for GPT-2 and LLaMA, tp 2 and 4, with and without
// sequence parallelism, with a vocabulary that tp does not divide (padded) and an ignored target.
#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <string>

#include "braid/autograd/variable.h"
#include "braid/nn/transformer.h"
#include "braid/parallel/tensor/tp_group.h"
#include "testing/run_ranks.h"
#include "testing/tensor_compare.h"

namespace braid::parallel {
namespace {

struct Case {
  std::string arch;
  int tp;
  bool sp;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.arch << " tp=" << c.tp << (c.sp ? " sequence parallel" : "");
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.arch + "_tp" + std::to_string(info.param.tp) + (info.param.sp ? "_sp" : "");
}

nn::ModelConfig config(const std::string& arch) {
  nn::ModelConfig c = nn::ModelConfig::preset(arch == "gpt2" ? "gpt2-tiny" : "llama-tiny");
  c.vocab_size = 1001;  // not a multiple of 2 or 4: the last rank holds padding rows
  if (arch == "llama_tied") c.tie_word_embeddings = true;
  return c;
}

struct Batch {
  Tensor ids, targets;
};

Batch batch(int64_t vocab) {
  const int64_t B = 2, T = 8;
  Batch b{Tensor::empty(Shape{B, T}, DType::i32), Tensor::empty(Shape{B, T}, DType::i32)};
  Rng rng(7);
  for (int64_t i = 0; i < B * T; ++i) {
    b.ids.data<int32_t>()[i] = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(vocab));
    b.targets.data<int32_t>()[i] =
        static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(vocab));
  }
  b.targets.data<int32_t>()[5] = -100;                             // ignored
  b.targets.data<int32_t>()[6] = static_cast<int32_t>(vocab - 1);  // the last real row
  return b;
}

struct Reference {
  float loss = 0;
  std::map<std::string, Tensor> params, grads;  // full shapes
  Tensor logits;
};

Reference reference(const nn::ModelConfig& cfg, const Batch& b) {
  nn::TransformerOptions o;
  o.seed = 11;
  nn::Transformer m(cfg, o);
  Reference r;
  r.logits = m.logits(b.ids);
  m.zero_grad();
  autograd::Variable loss = m.loss(b.ids, b.targets);
  r.loss = loss.value().item();
  loss.backward();
  for (auto& [name, v] : m.named_parameters()) {
    r.params[name] = v.value().clone();
    r.grads[name] = v.grad().clone();
  }
  return r;
}

class TensorParallelModel : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallelModel, LossAndEveryGradientMatchOneProcess) {
  const Case c = GetParam();
  const nn::ModelConfig cfg = config(c.arch);
  const Batch b = batch(cfg.vocab_size);
  const Reference ref = reference(cfg, b);
  testing::run_ranks(c.tp, [&](comm::ProcessGroup& pg) {
    auto group = std::shared_ptr<comm::ProcessGroup>(&pg, [](comm::ProcessGroup*) {});
    TpGroup tp(group, c.sp);
    nn::TransformerOptions o;
    o.seed = 11;
    o.tensor_parallel = &tp;
    nn::Transformer m(cfg, o);
    // Logits of the whole vocabulary, gathered.
    EXPECT_TRUE(testing::all_close(m.logits(b.ids), ref.logits, 1e-4, 1e-5)) << "logits";
    m.zero_grad();
    autograd::Variable loss = m.loss(b.ids, b.targets);
    EXPECT_NEAR(loss.value().item(), ref.loss, 1e-5 * std::abs(ref.loss)) << "rank " << pg.rank();
    loss.backward();
    for (auto& [name, slot] : m.named_parameter_slots()) {
      // This rank's slice of one process's parameter and gradient.
      Tensor want_p = Tensor::empty(slot->shape, DType::f32);
      Tensor want_g = Tensor::empty(slot->shape, DType::f32);
      nn::take_slice(ref.params.at(name), want_p, slot->tp);
      nn::take_slice(ref.grads.at(name), want_g, slot->tp);
      EXPECT_TRUE(testing::all_close(slot->var.value(), want_p, 0, 0))
          << name << " (initialisation) rank " << pg.rank();
      EXPECT_TRUE(testing::all_close(slot->var.grad(), want_g, 1e-4, 1e-6))
          << name << " (gradient) rank " << pg.rank();
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Layouts, TensorParallelModel,
                         ::testing::Values(Case{"gpt2", 2, false}, Case{"gpt2", 2, true},
                                           Case{"gpt2", 4, false}, Case{"gpt2", 4, true},
                                           Case{"llama", 2, false}, Case{"llama", 2, true},
                                           Case{"llama", 4, false}, Case{"llama", 4, true},
                                           Case{"llama_tied", 4, true}),
                         case_name);

TEST(TensorParallelModel, BadSplitsNameTheField) {
  nn::ModelConfig c = nn::ModelConfig::preset("gpt2-tiny");  // 4 heads
  try {
    c.validate_tensor_parallel(3);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_head 4 is not divisible by "
                                         "parallel.tensor_parallel_size 3"),
              std::string::npos)
        << e.what();
  }
  nn::ModelConfig l = nn::ModelConfig::preset("llama-tiny");  // 4 heads, 2 kv heads
  l.n_head = 6;
  l.n_kv_head = 3;
  l.d_model = 96;
  EXPECT_THROW(l.validate_tensor_parallel(2), Error);  // 3 kv heads over 2: neither splits
}

}  // namespace
}  // namespace braid::parallel
