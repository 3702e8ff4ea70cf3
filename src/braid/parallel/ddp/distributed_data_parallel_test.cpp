// DistributedDataParallel on thread-backed ranks: bucket planning, the start-up broadcast,
// reduction during backward, no_sync, frozen and unused parameters. (End-to-end parity of
// DDP training against one process is in train/ddp_parity_test.cpp.)
#include "braid/parallel/ddp/distributed_data_parallel.h"

#include <gtest/gtest.h>

#include "braid/autograd/functions.h"
#include "braid/core/rng.h"
#include "testing/run_ranks.h"
#include "testing/tensor_compare.h"

namespace braid::parallel {
namespace {

using autograd::Variable;

std::shared_ptr<comm::ProcessGroup> borrow(comm::ProcessGroup& pg) {
  return std::shared_ptr<comm::ProcessGroup>(&pg, [](comm::ProcessGroup*) {});
}

// y = linear(linear(x, w1, b1), w2, b2), with every parameter a view of one flat buffer laid
// out in order of first use (w1 b1 w2 b2), plus `spare`, a parameter forward never touches.
struct TwoLayers {
  static constexpr int64_t D = 8;
  Tensor flat = Tensor::zeros(Shape{2 * D * D + 3 * D});  // w1 b1 w2 b2 spare
  Tensor grads = Tensor::zeros(Shape{flat.numel()});
  std::vector<DdpParam> params;

  TwoLayers(uint64_t seed, bool spare_trainable, bool freeze_w1 = false) {
    Rng rng(seed);
    Tensor init = Tensor::randn(Shape{flat.numel()}, rng, 0.5f);
    flat.copy_(init);
    int64_t off = 0;
    auto add = [&](const char* name, Shape shape, bool trainable) {
      int64_t n = shape.numel();
      Variable v(flat.flat_range(off, n).view(shape), trainable, name);
      if (trainable) v.set_grad(grads.flat_range(off, n).view(shape));
      params.push_back({v, off});
      off += n;
    };
    add("w1", Shape{D, D}, !freeze_w1);
    add("b1", Shape{D}, true);
    add("w2", Shape{D, D}, true);
    add("b2", Shape{D}, true);
    add("spare", Shape{D}, spare_trainable);
  }
  Variable& p(int i) { return params[i].param; }

  // Backward of sum(y * dout) for a batch drawn from `seed`.
  void backward(uint64_t seed) {
    Rng rng(seed);
    Variable x(Tensor::randn(Shape{4, D}, rng));
    Variable y = autograd::linear(autograd::linear(x, p(0), p(1)), p(2), p(3));
    y.backward(Tensor::randn(Shape{4, D}, rng));
  }
};

TEST(DdpBuckets, CutFromTheEndOfTheBufferAndNeverSpanAFrozenParameter) {
  // Parameters at offsets 0, 10, 30, 40, 70 (sizes 10, 20, 10, 30, 5); cap 25 elements.
  std::vector<int64_t> off{0, 10, 30, 40, 70}, size{10, 20, 10, 30, 5};
  auto b = plan_buckets(off, size, {true, true, true, true, true}, 25);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].offset, 40);  // 75-offset end: [70,75) + [40,70) = 35 >= 25 closes it
  EXPECT_EQ(b[0].size, 35);
  EXPECT_EQ(b[0].params, (std::vector<int>{4, 3}));
  EXPECT_EQ(b[1].offset, 10);
  EXPECT_EQ(b[1].size, 30);
  EXPECT_EQ(b[1].params, (std::vector<int>{2, 1}));
  EXPECT_EQ(b[2].offset, 0);
  EXPECT_EQ(b[2].params, (std::vector<int>{0}));

  // Parameter 2 frozen: excluded, and the buckets on either side of it stay apart.
  b = plan_buckets(off, size, {true, true, false, true, true}, 1000);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].offset, 40);
  EXPECT_EQ(b[0].size, 35);
  EXPECT_EQ(b[1].offset, 0);
  EXPECT_EQ(b[1].size, 30);
  EXPECT_EQ(b[1].params, (std::vector<int>{1, 0}));
}

TEST(Ddp, BroadcastsRankZerosWeightsAndSumsGradientsDuringBackward) {
  constexpr int N = 3;
  // Expected: the sum over ranks of each rank's gradient, all from rank 0's weights.
  TwoLayers ref(/*seed=*/100, /*spare_trainable=*/false);
  Tensor expected = Tensor::zeros(Shape{ref.grads.numel()});
  for (int r = 0; r < N; ++r) {
    ref.grads.fill_(0.0);
    ref.backward(1000 + r);
    float* e = expected.data<float>();
    for (int64_t i = 0; i < expected.numel(); ++i) e[i] += ref.grads.data<float>()[i];
  }
  braid::testing::run_ranks(N, [&](comm::ProcessGroup& pg) {
    TwoLayers m(/*seed=*/100 + pg.rank(), /*spare_trainable=*/false);  // ranks start apart
    DdpOptions o;
    o.bucket_mb = 40 * 4 / 1048576.0;  // 40 elements: several buckets
    DistributedDataParallel ddp(m.params, m.flat, m.grads, borrow(pg), o);
    EXPECT_GT(ddp.buckets().size(), 1u);
    EXPECT_TRUE(braid::testing::all_close(m.flat, ref.flat, 0, 0)) << "not rank 0's weights";
    m.backward(1000 + pg.rank());
    ddp.finish_backward();
    const DdpStepStats& st = ddp.last_step_stats();
    // Every bucket but the one holding w1 (whose gradient is final last) left during backward.
    EXPECT_GE(st.buckets_launched_in_backward, st.buckets - 1);
    EXPECT_EQ(st.bytes, (m.flat.numel() - TwoLayers::D) * 4);  // all but the frozen spare
    EXPECT_TRUE(braid::testing::all_close(m.grads, expected, 1e-6, 1e-6));
  });
}

TEST(Ddp, NoSyncAccumulatesLocallyAndTheNextSyncedBackwardReducesTheSum) {
  braid::testing::run_ranks(2, [&](comm::ProcessGroup& pg) {
    TwoLayers m(7, false), local(7, false);
    DistributedDataParallel ddp(m.params, m.flat, m.grads, borrow(pg));
    {
      NoSyncGuard guard(ddp);
      EXPECT_FALSE(ddp.sync());
      m.backward(10 + pg.rank());
      ddp.finish_backward();  // a no-op without sync
    }
    EXPECT_TRUE(ddp.sync());
    local.backward(10 + pg.rank());
    EXPECT_TRUE(braid::testing::all_close(m.grads, local.grads, 0, 0)) << "no_sync communicated";
    m.backward(20 + pg.rank());
    ddp.finish_backward();
    // Expected: sum over both ranks of both micro-steps.
    TwoLayers all(7, false);
    for (int r = 0; r < 2; ++r) {
      all.backward(10 + r);
      all.backward(20 + r);
    }
    EXPECT_TRUE(braid::testing::all_close(m.grads, all.grads, 1e-6, 1e-6));
  });
}

TEST(Ddp, FrozenParametersAreNeitherReducedNorRequired) {
  braid::testing::run_ranks(2, [&](comm::ProcessGroup& pg) {
    TwoLayers m(3, /*spare_trainable=*/false, /*freeze_w1=*/true);
    DistributedDataParallel ddp(m.params, m.flat, m.grads, borrow(pg));
    for (const auto& b : ddp.buckets())
      for (int i : b.params) EXPECT_TRUE(i != 0 && i != 4) << "frozen parameter " << i;
    m.backward(5 + pg.rank());
    ddp.finish_backward();
    EXPECT_EQ(ddp.last_step_stats().bytes, (m.flat.numel() - 64 - 8) * 4);
    // w1's gradient slot is untouched (frozen: no gradient at all).
    EXPECT_TRUE(
        braid::testing::all_close(m.grads.flat_range(0, 64), Tensor::zeros(Shape{64}), 0, 0));
  });
}

TEST(Ddp, ATrainableParameterWithNoGradientIsAnErrorNamingIt) {
  auto errors = braid::testing::run_ranks_collect(2, [&](comm::ProcessGroup& pg) {
    TwoLayers m(3, /*spare_trainable=*/true);
    DistributedDataParallel ddp(m.params, m.flat, m.grads, borrow(pg));
    m.backward(5 + pg.rank());
    ddp.finish_backward();
  });
  for (auto& e : errors) {
    std::string msg = braid::testing::what(e);
    EXPECT_NE(msg.find("1 trainable parameter(s) received no gradient"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'spare'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("find_unused_parameters"), std::string::npos) << msg;
  }
}

TEST(Ddp, FindUnusedParametersReducesTheirZeroGradientAndGoesOn) {
  braid::testing::run_ranks(2, [&](comm::ProcessGroup& pg) {
    TwoLayers m(3, /*spare_trainable=*/true), ref(3, true);
    DdpOptions o;
    o.find_unused_parameters = true;
    DistributedDataParallel ddp(m.params, m.flat, m.grads, borrow(pg), o);
    for (int step = 0; step < 2; ++step) {
      m.grads.fill_(0.0);
      m.backward(5 + pg.rank());
      ddp.finish_backward();
    }
    ref.backward(5);
    ref.backward(6);
    EXPECT_TRUE(braid::testing::all_close(m.grads, ref.grads, 1e-6, 1e-6));
    EXPECT_EQ(ddp.last_step_stats().bytes, m.flat.numel() * 4);
  });
}

}  // namespace
}  // namespace braid::parallel
