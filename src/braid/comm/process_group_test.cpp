// ProcessGroup behaviour beyond moving data: determinism, split, independent groups, argument
// checks, and the failure contract (timeouts, mismatches, departed ranks) on the local backend.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "braid/comm/chunking.h"
#include "braid/comm/process_group.h"
#include "testing/run_ranks.h"
#include "testing/tensor_compare.h"

namespace braid::comm {
namespace {

using braid::testing::run_ranks;
using braid::testing::run_ranks_collect;
using braid::testing::RunRanksOptions;
using braid::testing::what;

// Random data whose sum depends on the order of additions.
Tensor noisy(int64_t n, int rank, DType t) {
  Rng rng(1234 + rank);
  Tensor x = Tensor::randn(Shape{n}, rng, 1.0f);
  float* p = x.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] *= (i % 7 == 0) ? 1e6f : 1e-3f;
  return x.to(t);
}

TEST(Determinism, AllReduceEqualsReduceScatterThenAllGatherBitForBit) {
  for (int w : {2, 3, 4}) {
    run_ranks(w, [](ProcessGroup& g) {
      for (DType t : {DType::f32, DType::bf16, DType::f16})
        for (int64_t n : {int64_t{1}, int64_t{999}, int64_t{10007}}) {
          Tensor a = noisy(n, g.rank(), t);
          g.all_reduce(a)->wait();
          Tensor in = noisy(n, g.rank(), t);
          Chunk c = chunk_of(n, g.size(), g.rank());
          Tensor shard = Tensor::empty(Shape{c.size}, t);
          g.reduce_scatter(shard, in)->wait();
          Tensor b = Tensor::empty(Shape{n}, t);
          g.all_gather(b, shard)->wait();
          EXPECT_TRUE(braid::testing::bit_equal(a, b)) << dtype_name(t) << " n=" << n;
          // And the sum is the rank-ordered one, the same on every rank.
          std::vector<float> want(n, 0.0f);
          for (int r = 0; r < g.size(); ++r) {
            auto v = noisy(n, r, t).to_f32_vector();
            for (int64_t i = 0; i < n; ++i) want[i] = r == 0 ? v[i] : want[i] + v[i];
          }
          Tensor ref = Tensor::from_vector(want, Shape{n}).to(t);
          EXPECT_TRUE(braid::testing::bit_equal(a, ref)) << dtype_name(t) << " n=" << n;
        }
    });
  }
}

TEST(Determinism, LargeReduceScatterWithStreamingStoresMatchesAllReduce) {
  // Each rank's f32 output is over 4 MiB, so the shm engine streams it (Note [Streaming
  // stores]); in place it does not. Both must hold the all_reduce's bits.
  const int64_t n = 2 * (int64_t{1} << 20) + 2 * 1031 + 1;
  run_ranks(2, [&](ProcessGroup& g) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
      Tensor a = noisy(n, g.rank(), DType::f32);
      g.all_reduce(a, op)->wait();
      Chunk c = chunk_of(n, g.size(), g.rank());
      Tensor shard = Tensor::empty(Shape{c.size}, DType::f32);
      g.reduce_scatter(shard, noisy(n, g.rank(), DType::f32), op)->wait();
      EXPECT_TRUE(braid::testing::bit_equal(shard, a.flat_range(c.offset, c.size)));
      Tensor in = noisy(n, g.rank(), DType::f32);
      Tensor mine = in.flat_range(c.offset, c.size);
      g.reduce_scatter(mine, in, op)->wait();
      EXPECT_TRUE(braid::testing::bit_equal(mine, a.flat_range(c.offset, c.size)));
    }
  });
}

TEST(Split, EvenOddAndRankListsAndNested) {
  run_ranks(4, [](ProcessGroup& g) {
    auto half = g.split(g.rank() % 2, g.rank(), "parity");
    ASSERT_TRUE(half);
    EXPECT_EQ(half->size(), 2);
    EXPECT_EQ(half->rank(), g.rank() / 2);
    Tensor x = Tensor::full(Shape{5}, g.rank());
    half->all_reduce(x)->wait();
    EXPECT_EQ(x.to_f32_vector()[4], g.rank() % 2 == 0 ? 0 + 2 : 1 + 3);

    // A rank list in a chosen order; non-members get no group.
    auto sub = g.split(std::vector<int>{3, 1, 0}, "three");
    if (g.rank() == 2) {
      EXPECT_FALSE(sub);
    } else {
      ASSERT_TRUE(sub);
      EXPECT_EQ(sub->size(), 3);
      EXPECT_EQ(sub->rank(), g.rank() == 3 ? 0 : g.rank() == 1 ? 1 : 2);
      Tensor y = Tensor::full(Shape{3}, 0);
      if (sub->rank() == 0) y.fill_(42);
      sub->broadcast(y, 0)->wait();
      EXPECT_EQ(y.to_f32_vector()[2], 42);
      auto solo = sub->split(sub->rank(), 0);  // groups of one
      ASSERT_TRUE(solo);
      EXPECT_EQ(solo->size(), 1);
      solo->all_reduce(y)->wait();
    }
    EXPECT_EQ(g.collectives_issued(), 2u);
  });
}

// Note [Comm threads]: ranks may order two groups' collectives differently.
TEST(Groups, IndependentGroupsInterleaveDifferentlyPerRank) {
  run_ranks(2, [](ProcessGroup& g) {
    auto other = g.split(0, g.rank(), "other");
    for (int k = 0; k < 10; ++k) {
      Tensor a = Tensor::full(Shape{300}, 1), b = Tensor::full(Shape{300}, 2);
      std::shared_ptr<Work> wa, wb;
      if (g.rank() == 0) {
        wa = g.all_reduce(a);
        wb = other->all_reduce(b);
        wb->wait();  // waits on the second group first
        wa->wait();
      } else {
        wb = other->all_reduce(b);
        wa = g.all_reduce(a);
        wa->wait();
        wb->wait();
      }
      EXPECT_EQ(a.to_f32_vector()[299], 2);
      EXPECT_EQ(b.to_f32_vector()[299], 4);
    }
  });
}

// Note [Inline collectives]: a small collective may start on the issuing thread, but a late peer
// never holds the caller (rank 1 issues only once rank 0's call has returned, so a call that
// waited for it would hang until the timeout), and ops queued behind a running one stay in order.
TEST(Inline, LatePeerNeverHoldsTheCallerAndOrderIsKept) {
  std::atomic<bool> returned{false};
  run_ranks(2, [&](ProcessGroup& g) {
    Tensor x = Tensor::full(Shape{1024}, g.rank() + 1);  // one 4 KiB step: may run inline
    if (g.rank() == 0) {
      auto work = g.all_reduce(x);
      EXPECT_FALSE(work->is_completed());
      returned = true;
      work->wait();
    } else {
      while (!returned) std::this_thread::yield();
      g.all_reduce(x)->wait();
    }
    EXPECT_EQ(x.to_f32_vector()[1023], 3);
    // Multi-step ops go to the comm thread; small ones issued behind them must queue.
    for (int k = 0; k < 20; ++k) {
      Tensor big = Tensor::full(Shape{5000}, k + g.rank());
      Tensor small = Tensor::full(Shape{16}, k * g.rank());
      auto w_big = g.all_reduce(big);
      auto w_small = g.all_reduce(small);
      w_small->wait();
      EXPECT_TRUE(w_big->is_completed());
      EXPECT_EQ(w_small->seq(), w_big->seq() + 1);
      EXPECT_EQ(big.to_f32_vector()[4999], 2 * k + 1);
      EXPECT_EQ(small.to_f32_vector()[15], k);
    }
  });
}

// ProcessGroupOptions::synchronous (Note [Host group on the caller], mpi/hier_engine.h): every
// collective, multi-step ones too, is done when the call returns, in issue order, same bits.
TEST(Synchronous, EveryCollectiveIsDoneWhenTheCallReturns) {
  RunRanksOptions o;
  o.group.synchronous = true;
  run_ranks(
      3,
      [&](ProcessGroup& g) {
        for (int64_t n : {int64_t{16}, int64_t{5000}, int64_t{100003}}) {
          Tensor x = noisy(n, g.rank(), DType::f32), y = x.clone();
          auto w = g.all_reduce(x);
          EXPECT_TRUE(w->is_completed()) << n;
          const Chunk c = chunk_of(n, g.size(), g.rank());
          Tensor part = y.flat_range(c.offset, c.size);
          EXPECT_TRUE(g.reduce_scatter(part, y)->is_completed()) << n;
          EXPECT_TRUE(g.all_gather(y, part)->is_completed()) << n;
          EXPECT_TRUE(braid::testing::bit_equal(x, y)) << n;
          w->wait();
        }
      },
      o);
}

// Note [One-copy collectives] (shm/shm_one_copy.cpp): a broadcast of 128 KiB or more copied
// straight between the root's buffer and the peers' (the root pushing a part, the peers pulling
// the rest) gives what the slots give (4 KiB slots: many steps), from every root, and the
// root's buffer is free to change once its call is done.
TEST(OneCopy, BroadcastEqualsTheSlotsFromEveryRoot) {
  for (bool one_copy : {true, false}) {
    RunRanksOptions o;
    o.group.one_copy = one_copy;
    o.group.shm_slot_bytes = 4096;
    run_ranks(
        3,
        [&](ProcessGroup& g) {
          for (int64_t n : {int64_t{32767}, int64_t{32768}, int64_t{100003}, int64_t{1} << 20})
            for (int root = 0; root < g.size(); ++root) {
              Tensor x = noisy(n, g.rank(), DType::f32);
              const Tensor sent = noisy(n, root, DType::f32);
              g.broadcast(x, root)->wait();
              if (g.rank() == root)
                x.fill_(-1.0f);  // the peers have read it
              else
                EXPECT_TRUE(braid::testing::bit_equal(x, sent)) << n << " root " << root;
            }
        },
        o);
  }
}

TEST(Validation, WrongSizesThrowAtOnceNamingTheNumbers) {
  run_ranks(2, [](ProcessGroup& g) {
    Tensor in = Tensor::zeros(Shape{10});
    try {
      g.reduce_scatter(Tensor::zeros(Shape{4}), in);
      ADD_FAILURE() << "no error";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("output has 4 elements, expected 5"), std::string::npos)
          << e.what();
    }
    EXPECT_THROW(g.all_gather(Tensor::zeros(Shape{10}), Tensor::zeros(Shape{3})), CommError);
    EXPECT_THROW(g.all_gather(Tensor::zeros(Shape{10}), Tensor::zeros(Shape{5}, DType::i32)),
                 CommError);
    EXPECT_THROW(g.broadcast(in, 2), CommError);
    EXPECT_THROW(g.send(in, g.rank()), CommError);
    EXPECT_THROW(g.all_to_all(in, in), CommError);
    g.barrier()->wait();  // errors above did not consume sequence numbers or break the group
    EXPECT_EQ(g.collectives_issued(), 1u);
  });
}

RunRanksOptions short_timeout(std::chrono::milliseconds t = std::chrono::milliseconds(500)) {
  RunRanksOptions o;
  o.group.timeout = t;
  return o;
}

TEST(Faults, SkippedCollectiveTimesOutNamingTheAbsentRank) {
  auto t0 = std::chrono::steady_clock::now();
  auto errors = run_ranks_collect(
      3,
      [](ProcessGroup& g) {
        Tensor x = Tensor::full(Shape{64}, 1);
        g.all_reduce(x)->wait();
        if (g.rank() == 2) {
          // Rank 2 skips the second all_reduce and is busy elsewhere until the others gave up.
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          return;
        }
        g.all_reduce(x)->wait();
      },
      short_timeout());
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(errors[2]);
  for (int r : {0, 1}) {
    std::string msg = what(errors[r]);
    EXPECT_NE(msg.find("all_reduce seq 2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("timed out"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ranks [2] never arrived"), std::string::npos) << msg;
    EXPECT_NE(msg.find("group 'test'"), std::string::npos) << msg;
  }
  EXPECT_LT(secs, 5.0);
}

TEST(Faults, MismatchedCountIsReportedWithBothSides) {
  auto errors = run_ranks_collect(2, [](ProcessGroup& g) {
    Tensor x = Tensor::full(Shape{g.rank() == 1 ? 1000 : 1024}, 1);
    g.all_reduce(x)->wait();
  });
  for (int r : {0, 1}) {
    std::string msg = what(errors[r]);
    EXPECT_NE(msg.find("mismatch at seq 1: rank 0 called all_reduce(f32, count 1024, sum) but "
                       "rank 1 called all_reduce(f32, count 1000, sum)"),
              std::string::npos)
        << msg;
  }
}

TEST(Faults, DifferentCollectivesAtOneSequenceNumber) {
  auto errors = run_ranks_collect(2, [](ProcessGroup& g) {
    Tensor x = Tensor::full(Shape{8}, 1);
    if (g.rank() == 0)
      g.all_reduce(x)->wait();
    else
      g.broadcast(x, 0)->wait();
  });
  for (int r : {0, 1})
    EXPECT_NE(what(errors[r]).find("rank 1 called broadcast(f32, count 8, root 0)"),
              std::string::npos)
        << what(errors[r]);
}

TEST(Faults, RankThatFailsMakesPeersFailPromptlyAndGroupStaysBroken) {
  auto t0 = std::chrono::steady_clock::now();
  auto errors = run_ranks_collect(
      3,
      [](ProcessGroup& g) {
        if (g.rank() == 1) throw std::runtime_error("rank 1 crashed");
        Tensor x = Tensor::full(Shape{8}, 1);
        auto w = g.all_reduce(x);
        EXPECT_THROW(w->wait(), CommError);
        try {
          g.barrier()->wait();  // the group is unusable after the failure
        } catch (const CommError& e) {
          throw CommError(std::string("second: ") + e.what());
        }
      },
      short_timeout(std::chrono::seconds(20)));
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 3.0) << "peers waited for the timeout instead of noticing rank 1 left";
  for (int r : {0, 2}) {
    std::string msg = what(errors[r]);
    EXPECT_NE(msg.find("failed earlier"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 1 left the group"), std::string::npos) << msg;
  }
}

TEST(Faults, RecvFromSilentPeerTimesOut) {
  auto errors = run_ranks_collect(
      2,
      [](ProcessGroup& g) {
        if (g.rank() == 0) {
          Tensor x = Tensor::zeros(Shape{4});
          g.recv(x, 1, 7)->wait();
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(1200));
        }
      },
      short_timeout());
  EXPECT_NE(what(errors[0]).find("rank 1 never sent"), std::string::npos) << what(errors[0]);
}

TEST(Options, EnvironmentOverridesTimeoutAndDebug) {
  ::setenv("BRAID_COMM_TIMEOUT", "2.5", 1);
  ::setenv("BRAID_COMM_DEBUG", "1", 1);
  auto o = ProcessGroupOptions::from_env({});
  ::unsetenv("BRAID_COMM_TIMEOUT");
  ::unsetenv("BRAID_COMM_DEBUG");
  EXPECT_EQ(o.timeout, std::chrono::milliseconds(2500));
  EXPECT_TRUE(o.debug);
  ::setenv("BRAID_COMM_TIMEOUT", "soon", 1);
  EXPECT_THROW(ProcessGroupOptions::from_env({}), CommError);
  ::unsetenv("BRAID_COMM_TIMEOUT");
  EXPECT_TRUE(ProcessGroupOptions::from_env({}).one_copy);
  ::setenv("BRAID_COMM_SINGLE_COPY", "0", 1);
  EXPECT_FALSE(ProcessGroupOptions::from_env({}).one_copy);
  ::setenv("BRAID_COMM_SINGLE_COPY", "cma", 1);
  EXPECT_THROW(ProcessGroupOptions::from_env({}), CommError);
  ::unsetenv("BRAID_COMM_SINGLE_COPY");
}

}  // namespace
}  // namespace braid::comm
