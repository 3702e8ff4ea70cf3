// DDP parity on the thread-backed group: N ranks with micro-batch b match one process with
// batch N b; accumulation of k micro-steps matches batch k b; runs are bit-identical.
#include <gtest/gtest.h>

#include <mutex>

#include "testing/run_ranks.h"
#include "testing/tensor_compare.h"
#include "braid/train/trainer.h"

namespace braid::train {
namespace {

TrainConfig tiny(int64_t micro, int64_t accum, const std::string& strategy) {
  TrainConfig c;
  c.model.preset = "gpt2-tiny";
  c.data.random_tokens = true;
  c.data.seq_len = 16;
  c.training.micro_batch_size = micro;
  c.training.gradient_accumulation_steps = accum;
  c.training.max_steps = 10;
  c.training.eval_batches = 0;
  c.training.eval_interval = 0;
  c.optimizer.lr = 1e-3;
  c.optimizer.grad_clip = 1.0;
  c.schedule.type = "cosine";
  c.schedule.warmup_steps = 2;
  c.parallel.strategy = strategy;
  c.parallel.bucket_mb = 0.01;  // several buckets even for a tiny model
  c.output.export_model = false;
  c.output.samples = 0;
  return c;
}

TrainerOptions quiet() {
  TrainerOptions o;
  o.quiet = true;
  o.measure_peak = false;
  return o;
}

// Note [Key bias parity]: the gradient of GPT-2's attention key bias (the middle third of
// c_attn.bias) is exactly zero in exact arithmetic (a bias on k adds q.b to every score of a
// row, and softmax ignores shifts), so in floats it is rounding noise, which AdamW's
// m / (sqrt(v) + eps) turns into updates of arbitrary sign. Those elements can only agree to
// an absolute tolerance; every other element must agree to 1e-5 relative.
::testing::AssertionResult weights_match(const Tensor& actual, const Tensor& expected) {
  nn::ModelConfig mc = nn::ModelConfig::preset("gpt2-tiny");
  nn::TransformerOptions o;
  o.init_weights = false;
  o.allocate_grads = false;
  nn::Transformer layout(mc, o);
  for (const auto& e : layout.flat().entries()) {
    auto check = [&](int64_t off, int64_t n, double rtol, double atol, const char* part) {
      auto r = braid::testing::all_close(actual.flat_range(off, n), expected.flat_range(off, n),
                                         rtol, atol);
      if (!r) r << " in " << e.name << part;
      return r;
    };
    const int64_t o0 = e.range.offset, C = mc.d_model;
    if (e.name.find("attn.c_attn.bias") != std::string::npos) {
      for (auto r : {check(o0, C, 1e-5, 1e-7, " (q)"), check(o0 + 2 * C, C, 1e-5, 1e-7, " (v)"),
                     check(o0 + C, C, 0, 1e-5, " (k, Note [Key bias parity])")})
        if (!r) return r;
    } else if (auto r = check(o0, e.range.size, 1e-5, 1e-7, ""); !r) {
      return r;
    }
  }
  return ::testing::AssertionSuccess();
}

Tensor train_one(const TrainConfig& cfg) {
  Trainer t(cfg, nullptr, quiet());
  t.run();
  return t.model().flat().params().clone();
}

std::vector<Tensor> train_ranks(int n, const TrainConfig& cfg) {
  std::vector<Tensor> out(n);
  std::mutex mu;
  braid::testing::run_ranks(n, [&](comm::ProcessGroup& pg) {
    std::shared_ptr<comm::ProcessGroup> group(&pg, [](comm::ProcessGroup*) {});
    Trainer t(cfg, group, quiet());
    t.run();
    Tensor w = t.model().flat().params().clone();
    std::lock_guard<std::mutex> lock(mu);
    out[pg.rank()] = w;
  });
  return out;
}

class DdpParity : public ::testing::TestWithParam<int> {};

TEST_P(DdpParity, NRanksMatchOneProcessWithNTimesTheBatch) {
  const int n = GetParam();
  const int64_t b = 2;
  Tensor single = train_one(tiny(n * b, 1, "none"));
  std::vector<Tensor> ranks = train_ranks(n, tiny(b, 1, "ddp"));
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(braid::testing::bit_equal(ranks[r], ranks[0])) << "rank " << r << " diverged";
    EXPECT_TRUE(weights_match(ranks[r], single)) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, DdpParity, ::testing::Values(1, 2, 3, 4));

TEST(DdpParity, AccumulationMatchesTheBigBatch) {
  Tensor big = train_one(tiny(6, 1, "none"));
  Tensor accum = train_one(tiny(2, 3, "none"));
  EXPECT_TRUE(weights_match(accum, big));
  // Accumulation under DDP (no_sync on the first micro-steps) too.
  std::vector<Tensor> ddp = train_ranks(2, tiny(1, 3, "ddp"));
  EXPECT_TRUE(weights_match(ddp[0], big));
}

TEST(DdpDeterminism, SameConfigSameWorldIsBitIdentical) {
  std::vector<Tensor> a = train_ranks(2, tiny(2, 2, "ddp"));
  std::vector<Tensor> b = train_ranks(2, tiny(2, 2, "ddp"));
  EXPECT_TRUE(braid::testing::bit_equal(a[0], b[0]));
  EXPECT_TRUE(braid::testing::bit_equal(a[1], b[1]));
}

TEST(DdpErrors, BatchArithmeticThatDoesNotAddUpNamesTheNumbers) {
  TrainConfig c = tiny(2, 1, "ddp");
  c.training.global_batch_size = 5;
  auto errors = braid::testing::run_ranks_collect(2, [&](comm::ProcessGroup& pg) {
    std::shared_ptr<comm::ProcessGroup> group(&pg, [](comm::ProcessGroup*) {});
    Trainer t(c, group, quiet());
  });
  for (auto& e : errors) {
    std::string msg = braid::testing::what(e);
    EXPECT_NE(msg.find("global_batch_size 5 != micro_batch_size 2 x gradient_accumulation_steps "
                       "1 x data-parallel size 2 = 4"),
              std::string::npos)
        << msg;
  }
}

}  // namespace
}  // namespace braid::train
