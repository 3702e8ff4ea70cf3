// Note [Norm split over replicas] (replicated_data_parallel.cpp): each DDP rank takes the norm
// over its share of the flat gradient and the group combines the shares. With the same gradients
// on every rank the norm is the same bits as one process's pass over the whole buffer, and every
// gradient is clipped on every rank, also when ranks hold tensor-parallel slices.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>

#include "braid/nn/transformer.h"
#include "braid/optim/clip_grad.h"
#include "braid/parallel/parallelize.h"
#include "testing/run_ranks.h"
#include "testing/tensor_compare.h"

namespace braid::parallel {
namespace {

constexpr double kMaxNorm = 0.5;

struct Result {
  double norm = 0;
  std::vector<Tensor> grads;  // clipped, in optimizer_slices() order
};

// A ddp (or tp-only) layout of a 2-layer GPT-2 over pg, every gradient element set from its
// parameter's name and index alone (so the same on every dp rank, and a tp rank's slice the
// same whatever the dp size), then clipped to kMaxNorm.
Result clip_on(comm::ProcessGroup& pg, int tp) {
  ParallelPlan spec;
  spec.name = pg.size() > tp ? "ddp" : "none";
  spec.tensor_parallel_size = tp;
  std::unique_ptr<Parallelism> p =
      parallelize(spec, std::shared_ptr<comm::ProcessGroup>(&pg, [](auto*) {}));
  nn::ModelConfig cfg = nn::ModelConfig::preset("gpt2-tiny");
  cfg.n_layer = 2;
  nn::TransformerOptions to;
  to.materialize = false;
  to.tensor_parallel = p->tensor_parallel();
  nn::Transformer model(cfg, to);
  MaterializeOptions mo;
  mo.fill = [&model](int u, Tensor& t) {
    model.full_layout().init_unit(model.global_unit(u), t, 1);
  };
  p->materialize(model, mo);
  const int tp_rank = p->mesh().coord("tp");
  Result r;
  for (const optim::ParamSlice& s : p->optimizer_slices()) {
    if (!s.grad.defined()) continue;
    Tensor g = s.grad;
    const uint64_t h = std::hash<std::string>{}(s.name()) + static_cast<uint64_t>(tp_rank) * 7919;
    float* d = g.data<float>();
    for (int64_t i = 0; i < g.numel(); ++i)
      d[i] = std::ldexp(static_cast<float>((h + 31 * static_cast<uint64_t>(i)) % 2001) - 1000.0f,
                        -8 - static_cast<int>((h >> 8) % 5));
    r.grads.push_back(g);
  }
  r.norm = p->clip_grad_norm(kMaxNorm);
  for (Tensor& g : r.grads) g = g.clone();
  return r;
}

bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

TEST(DdpNorm, EachRanksShareGivesOneProcesssNormBitForBitAndClipsEverything) {
  Result one;
  testing::run_ranks(1, [&](comm::ProcessGroup& pg) { one = clip_on(pg, 1); });
  ASSERT_GT(one.norm, kMaxNorm) << "the case must clip";
  for (int n : {2, 3}) {
    std::mutex mu;
    testing::run_ranks(n, [&](comm::ProcessGroup& pg) {
      const Result r = clip_on(pg, 1);
      std::lock_guard lock(mu);
      EXPECT_TRUE(same_bits(r.norm, one.norm)) << n << " ranks: " << r.norm << " vs " << one.norm;
      ASSERT_EQ(r.grads.size(), one.grads.size());
      for (size_t i = 0; i < r.grads.size(); ++i)
        EXPECT_TRUE(testing::bit_equal(r.grads[i], one.grads[i])) << "gradient " << i;
    });
  }
}

TEST(DdpNorm, WithTensorParallelSlicesEachCountsOnce) {
  // tp 2 alone, then dp 2 x tp 2: the same slices' gradients, the same norm.
  std::vector<Result> tp_only(2);
  testing::run_ranks(2, [&](comm::ProcessGroup& pg) { tp_only[pg.rank()] = clip_on(pg, 2); });
  ASSERT_GT(tp_only[0].norm, kMaxNorm);
  std::mutex mu;
  testing::run_ranks(4, [&](comm::ProcessGroup& pg) {
    const Result r = clip_on(pg, 2);
    std::lock_guard lock(mu);
    EXPECT_TRUE(same_bits(r.norm, tp_only[0].norm)) << r.norm << " vs " << tp_only[0].norm;
  });
}

}  // namespace
}  // namespace braid::parallel
