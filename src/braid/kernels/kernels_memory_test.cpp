// Kernel scratch is charged to the calling rank's tracker (Note [Kernel scratch], common.h):
// ranks as threads each see their own, a budget stops growth with OutOfMemory, the steady
// state charges nothing more, and a thread's scratch is released when it exits.
#include <gtest/gtest.h>

#include <functional>
#include <future>
#include <string>
#include <thread>

#include "braid/core/memory_tracker.h"
#include "braid/core/rng.h"
#include "braid/kernels/ops.h"

namespace braid::kernels {
namespace {

constexpr MemCategory kScratch = MemCategory::scratch;

// Runs fn on a fresh thread (so its scratch starts empty and is freed when it ends) and
// rethrows what it threw.
void on_fresh_thread(const std::function<void()>& fn) {
  std::exception_ptr error;
  std::thread t([&] {
    try {
      fn();
    } catch (...) {
      error = std::current_exception();
    }
  });
  t.join();
  if (error) std::rethrow_exception(error);
}

// Inputs of an attention forward that needs scratch: [B,T,NH,HS] panels per team thread.
struct Attention {
  explicit Attention(uint64_t seed) {
    Rng rng(seed);
    q = Tensor::randn(Shape{2, 96, 4, 32}, rng);
    k = Tensor::randn(Shape{2, 96, 4, 32}, rng);
    v = Tensor::randn(Shape{2, 96, 4, 32}, rng);
    out = Tensor::empty(Shape{2, 96, 4, 32});
    lse = Tensor::empty(Shape{2, 4, 96});
  }
  void forward() { attention_forward(out, lse, q, k, v); }
  Tensor q, k, v, out, lse;
};

// x[N,C] @ weight[V,C]^T in chunks of logits kept in scratch.
double ce_forward(uint64_t seed) {
  Rng rng(seed);
  Tensor x = Tensor::randn(Shape{64, 32}, rng), w = Tensor::randn(Shape{200, 32}, rng);
  Tensor tg = Tensor::empty(Shape{64}, DType::i32), lse = Tensor::empty(Shape{64});
  for (int64_t i = 0; i < 64; ++i) tg.data<int32_t>()[i] = static_cast<int32_t>(rng.below(200));
  int64_t count = 0;
  return lm_head_ce_forward(lse, &count, x, w, tg);
}

TEST(KernelScratch, TwoRanksAsThreadsChargeTheirOwnTrackers) {
  auto t0 = std::make_shared<MemoryTracker>("cpu (rank 0)");
  auto t1 = std::make_shared<MemoryTracker>("cpu (rank 1)");
  std::promise<void> rank0_ran, rank1_ran, rank0_checked;
  int64_t rank0_after_own = 0, rank0_after_other = 0, rank1_before_own = 0;
  std::thread r0([&] {
    MemoryScope scope(t0);
    Attention a(1);
    a.forward();
    ce_forward(2);
    rank0_after_own = t0->current(kScratch);
    rank0_ran.set_value();
    rank1_ran.get_future().wait();  // rank 1's kernels ran meanwhile
    rank0_after_other = t0->current(kScratch);
    rank0_checked.set_value();
  });
  std::thread r1([&] {
    MemoryScope scope(t1);
    rank0_ran.get_future().wait();
    rank1_before_own = t1->current(kScratch);
    Attention a(3);
    a.forward();
    ce_forward(4);
    rank1_ran.set_value();
    rank0_checked.get_future().wait();
  });
  r0.join();
  r1.join();
  EXPECT_GT(rank0_after_own, 0);
  EXPECT_EQ(rank1_before_own, 0) << "rank 0's kernels charged rank 1";
  EXPECT_EQ(rank0_after_other, rank0_after_own) << "rank 1's kernels changed rank 0's tracker";
  EXPECT_GT(t1->peak(kScratch), 0);
  // Both rank threads have exited: their scratch is freed and released.
  EXPECT_EQ(t0->current(kScratch), 0) << t0->breakdown();
  EXPECT_EQ(t1->current(kScratch), 0) << t1->breakdown();
}

TEST(KernelScratch, SteadyStateChargesNothingMore) {
  auto tracker = std::make_shared<MemoryTracker>();
  on_fresh_thread([&] {
    MemoryScope scope(tracker);
    Attention a(5);
    a.forward();
    ce_forward(6);
    const int64_t held = tracker->current(kScratch);
    EXPECT_GT(held, 0);
    tracker->reset_peaks();
    for (int i = 0; i < 3; ++i) a.forward(), ce_forward(6);
    EXPECT_EQ(tracker->current(kScratch), held);
    EXPECT_EQ(tracker->peak(kScratch), held);
  });
  EXPECT_EQ(tracker->current(kScratch), 0);
}

TEST(KernelScratch, ScratchMovesToTheThreadsNewTracker) {
  auto first = std::make_shared<MemoryTracker>(), second = std::make_shared<MemoryTracker>();
  on_fresh_thread([&] {
    {
      MemoryScope scope(first);
      ce_forward(7);
    }
    const int64_t held = first->current(kScratch);
    EXPECT_GT(held, 0);
    MemoryScope scope(second);
    ce_forward(7);
    EXPECT_EQ(first->current(kScratch), 0);
    EXPECT_EQ(second->current(kScratch), held);
  });
  EXPECT_EQ(second->current(kScratch), 0);
}

TEST(KernelScratch, TinyBudgetMakesScratchGrowthThrowOutOfMemory) {
  auto tracker = std::make_shared<MemoryTracker>("cpu (rank 3)");
  on_fresh_thread([&] {
    Attention a(8);  // the tensors are untracked: only scratch counts against the budget
    MemoryScope scope(tracker);
    tracker->set_budget(4096);
    try {
      a.forward();
      FAIL() << "expected OutOfMemory";
    } catch (const OutOfMemory& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("cpu (rank 3)"), std::string::npos) << msg;
      EXPECT_NE(msg.find("of kernel scratch"), std::string::npos) << msg;
      EXPECT_NE(msg.find("budget of 4.0 KiB"), std::string::npos) << msg;
    }
    EXPECT_LE(tracker->current(kScratch), 4096);
    tracker->set_budget(0);
    a.forward();  // a failed growth left the arena usable
    EXPECT_GT(tracker->current(kScratch), 4096);
  });
  EXPECT_EQ(tracker->current(kScratch), 0);
}

TEST(KernelScratch, NoTrackerChargesNothing) {
  auto tracker = std::make_shared<MemoryTracker>();
  on_fresh_thread([&] {
    ce_forward(9);  // no MemoryScope on this thread
    MemoryScope scope(tracker);
    EXPECT_EQ(tracker->total_current(), 0);
  });
}

}  // namespace
}  // namespace braid::kernels
