// Context parallelism against one process (Note [Context-parallel layout], Note [Ring
// attention]): the attention of a sequence split over cp ranks equals one process's rows, and
// its gradients; the loss summed over the cp ranks and every parameter's gradient summed over
// them equal one process's (fp32 tolerance), for GPT-2 and LLaMA with GQA, cp 2 and 4, ring and
// Ulysses, with tensor (and sequence) parallelism beside it; and the splits it cannot make fail
// on every rank naming the keys.
#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <string>

#include "braid/autograd/functions.h"
#include "braid/autograd/variable.h"
#include "braid/core/error.h"
#include "braid/nn/transformer.h"
#include "braid/parallel/context/cp_group.h"
#include "braid/parallel/device_mesh.h"
#include "braid/parallel/tensor/tp_group.h"
#include "testing/run_ranks.h"
#include "testing/tensor_compare.h"

namespace braid::parallel {
namespace {

std::shared_ptr<comm::ProcessGroup> borrowed(comm::ProcessGroup& pg) {
  return {&pg, [](comm::ProcessGroup*) {}};
}

// Rows of x[B, T, ...] at the given positions (a rank's tokens) -> [B, Tl, ...].
Tensor take_positions(const Tensor& x, const Tensor& where) {
  const int64_t B = x.size(0), T = x.size(1), Tl = where.numel();
  const int64_t W = x.numel() / (B * T);
  std::vector<int64_t> dims = x.shape().vec();
  dims[1] = Tl;
  Tensor out = Tensor::empty(Shape(dims), x.dtype());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tl; ++t)
      out.flat_range((b * Tl + t) * W, W)
          .copy_(x.flat_range((b * T + where.data<int32_t>()[t]) * W, W));
  return out;
}

struct AttnCase {
  int cp;
  CpMode mode;
  int64_t T, NH, NKV;
};

void PrintTo(const AttnCase& c, std::ostream* os) {
  *os << cp_mode_name(c.mode) << " cp=" << c.cp << " T=" << c.T << " NH=" << c.NH
      << " NKV=" << c.NKV;
}

class ContextParallelAttention : public ::testing::TestWithParam<AttnCase> {};

TEST_P(ContextParallelAttention, RowsAndGradientsMatchOneProcess) {
  const AttnCase c = GetParam();
  const int64_t B = 2, HS = 16;
  Rng rng(3);
  const Tensor q = Tensor::randn(Shape{B, c.T, c.NH, HS}, rng);
  const Tensor k = Tensor::randn(Shape{B, c.T, c.NKV, HS}, rng);
  const Tensor v = Tensor::randn(Shape{B, c.T, c.NKV, HS}, rng);
  const Tensor dout = Tensor::randn(Shape{B, c.T, c.NH, HS}, rng);
  autograd::Variable rq(q.clone(), true), rk(k.clone(), true), rv(v.clone(), true);
  autograd::Variable ry = autograd::attention(rq, rk, rv);
  ry.backward(dout);
  testing::run_ranks(c.cp, [&](comm::ProcessGroup& pg) {
    CpGroup cp(borrowed(pg), c.mode);
    const Tensor where = cp.positions(c.T / c.cp);
    autograd::Variable lq(take_positions(q, where), true), lk(take_positions(k, where), true),
        lv(take_positions(v, where), true);
    autograd::Variable y = cp.attention(lq, lk, lv);
    EXPECT_TRUE(testing::all_close(y.value(), take_positions(ry.value(), where), 1e-5, 1e-6))
        << "output, rank " << pg.rank();
    y.backward(take_positions(dout, where));
    EXPECT_TRUE(testing::all_close(lq.grad(), take_positions(rq.grad(), where), 1e-4, 1e-6))
        << "dq, rank " << pg.rank();
    EXPECT_TRUE(testing::all_close(lk.grad(), take_positions(rk.grad(), where), 1e-4, 1e-6))
        << "dk, rank " << pg.rank();
    EXPECT_TRUE(testing::all_close(lv.grad(), take_positions(rv.grad(), where), 1e-4, 1e-6))
        << "dv, rank " << pg.rank();
    EXPECT_GT(cp.stats().bytes, 0);
  });
}

INSTANTIATE_TEST_SUITE_P(Splits, ContextParallelAttention,
                         ::testing::Values(AttnCase{2, CpMode::ring, 32, 4, 2},
                                           AttnCase{4, CpMode::ring, 32, 4, 4},
                                           AttnCase{2, CpMode::ring, 256, 4, 1},
                                           AttnCase{4, CpMode::ring, 200, 2, 2},
                                           AttnCase{2, CpMode::ulysses, 32, 4, 2},
                                           AttnCase{4, CpMode::ulysses, 64, 8, 4},
                                           AttnCase{2, CpMode::ulysses, 200, 2, 2}));

// ---- The whole model ----

struct ModelCase {
  std::string arch;
  int cp;
  CpMode mode;
  int tp = 1;
  bool sp = false;
};

void PrintTo(const ModelCase& c, std::ostream* os) {
  *os << c.arch << " " << cp_mode_name(c.mode) << " cp=" << c.cp << " tp=" << c.tp
      << (c.sp ? " sequence parallel" : "");
}

std::string case_name(const ::testing::TestParamInfo<ModelCase>& info) {
  const ModelCase& c = info.param;
  return c.arch + "_" + cp_mode_name(c.mode) + "_cp" + std::to_string(c.cp) +
         (c.tp > 1 ? "_tp" + std::to_string(c.tp) : "") + (c.sp ? "_sp" : "");
}

nn::ModelConfig config(const std::string& arch) {
  nn::ModelConfig c = nn::ModelConfig::preset(arch == "gpt2" ? "gpt2-tiny" : "llama-tiny");
  if (arch == "llama") {  // GQA with heads every split divides: 8 query, 4 key/value heads
    c.n_head = 8;
    c.n_kv_head = 4;
  }
  return c;
}

struct Batch {
  Tensor ids, targets;
  double counted = 0;
};

Batch batch(int64_t vocab) {
  const int64_t B = 2, T = 32;
  Batch b{Tensor::empty(Shape{B, T}, DType::i32), Tensor::empty(Shape{B, T}, DType::i32)};
  Rng rng(7);
  for (int64_t i = 0; i < B * T; ++i) {
    b.ids.data<int32_t>()[i] = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(vocab));
    b.targets.data<int32_t>()[i] =
        static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(vocab));
  }
  b.targets.data<int32_t>()[5] = -100;  // ignored: the loss is token-weighted over the whole
  b.targets.data<int32_t>()[40] = -100;
  b.counted = static_cast<double>(B * T - 2);
  return b;
}

struct Reference {
  float loss = 0;
  std::map<std::string, Tensor> params, grads;
  Tensor logits;
};

Reference reference(const nn::ModelConfig& cfg, const Batch& b) {
  nn::TransformerOptions o;
  o.seed = 11;
  nn::Transformer m(cfg, o);
  Reference r;
  r.logits = m.logits(b.ids);
  m.zero_grad();
  autograd::Variable loss = m.loss(b.ids, b.targets, b.counted);
  r.loss = loss.value().item();
  loss.backward();
  for (auto& [name, v] : m.named_parameters()) {
    r.params[name] = v.value().clone();
    r.grads[name] = v.grad().clone();
  }
  return r;
}

class ContextParallelModel : public ::testing::TestWithParam<ModelCase> {};

TEST_P(ContextParallelModel, LossAndEveryGradientMatchOneProcess) {
  const ModelCase c = GetParam();
  const nn::ModelConfig cfg = config(c.arch);
  const Batch b = batch(cfg.vocab_size);
  const Reference ref = reference(cfg, b);
  testing::run_ranks(c.cp * c.tp, [&](comm::ProcessGroup& pg) {
    const DeviceMesh mesh = DeviceMesh::training(borrowed(pg), {.cp = c.cp, .tp = c.tp});
    CpGroup cp(mesh.group_ptr("cp"), c.mode);
    std::unique_ptr<TpGroup> tp;
    if (c.tp > 1) tp = std::make_unique<TpGroup>(mesh.group_ptr("tp"), c.sp);
    nn::TransformerOptions o;
    o.seed = 11;
    o.context_parallel = &cp;
    o.tensor_parallel = tp.get();
    nn::Transformer m(cfg, o);
    // Generation's forwards run whole sequences.
    EXPECT_TRUE(testing::all_close(m.logits(b.ids), ref.logits, 1e-4, 1e-5)) << "logits";
    m.zero_grad();
    autograd::Variable loss = m.loss(b.ids, b.targets, b.counted);
    loss.backward();
    // The cp ranks' losses and gradients are shares of one process's: sum them.
    Tensor total = loss.value().clone();
    mesh.group("cp").all_reduce(total)->wait();
    EXPECT_NEAR(total.item(), ref.loss, 1e-5 * std::abs(ref.loss)) << "rank " << pg.rank();
    for (auto& [name, slot] : m.named_parameter_slots()) {
      Tensor g = slot->var.grad().clone();
      mesh.group("cp").all_reduce(g)->wait();
      Tensor want_g = Tensor::empty(slot->shape, DType::f32);
      nn::take_slice(ref.grads.at(name), want_g, slot->tp);
      EXPECT_TRUE(testing::all_close(g, want_g, 1e-4, 1e-6))
          << name << " (gradient) rank " << pg.rank();
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ContextParallelModel,
    ::testing::Values(ModelCase{"gpt2", 2, CpMode::ring}, ModelCase{"gpt2", 4, CpMode::ring},
                      ModelCase{"gpt2", 2, CpMode::ulysses}, ModelCase{"gpt2", 4, CpMode::ulysses},
                      ModelCase{"llama", 2, CpMode::ring}, ModelCase{"llama", 4, CpMode::ring},
                      ModelCase{"llama", 2, CpMode::ulysses},
                      ModelCase{"llama", 4, CpMode::ulysses},
                      ModelCase{"llama", 2, CpMode::ring, 2, true},
                      ModelCase{"gpt2", 2, CpMode::ulysses, 2, false},
                      ModelCase{"llama", 2, CpMode::ulysses, 2, true}),
    case_name);

TEST(ContextParallelModel, SplitsItCannotMakeNameTheKeys) {
  // A sequence the zig-zag split cannot cut: every rank fails at the forward, naming the keys.
  nn::ModelConfig cfg = config("gpt2");
  const Batch b = batch(cfg.vocab_size);
  const Tensor ids = b.ids.view(Shape{4, 16});
  const auto errors = testing::run_ranks_collect(4, [&](comm::ProcessGroup& pg) {
    CpGroup cp(borrowed(pg), CpMode::ring);
    nn::TransformerOptions o;
    o.context_parallel = &cp;
    nn::Transformer m(cfg, o);
    Tensor odd = Tensor::empty(Shape{1, 12}, DType::i32);
    odd.zero_();
    (void)m.loss(odd, odd);
  });
  for (const auto& e : errors) {
    EXPECT_NE(testing::what(e).find("data.seq_len 12 does not split over "
                                    "parallel.context_parallel_size 4 with "
                                    "parallel.context_parallel_mode ring"),
              std::string::npos)
        << testing::what(e);
  }
  // Ulysses over more ranks than the heads divide: refused when the model is declared.
  const auto heads = testing::run_ranks_collect(4, [&](comm::ProcessGroup& pg) {
    CpGroup cp(borrowed(pg), CpMode::ulysses);
    nn::TransformerOptions o;
    o.context_parallel = &cp;
    nn::ModelConfig l = config("llama");
    l.n_kv_head = 2;
    nn::Transformer m(l, o);
  });
  for (const auto& e : heads) {
    EXPECT_NE(testing::what(e).find("model.n_kv_head 2"), std::string::npos) << testing::what(e);
    EXPECT_NE(testing::what(e).find("parallel.context_parallel_size 4"), std::string::npos)
        << testing::what(e);
  }
}

}  // namespace
}  // namespace braid::parallel
