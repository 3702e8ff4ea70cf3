// The collective checks as real processes under mpirun (label mpi). Arguments:
//   --transport=shm|p2p   force the MPI transport (default: auto, shm on one node)
//   --slot-bytes=N        shm staging bytes per step (default 4096: many steps per collective)
//   --no-one-copy         every shm broadcast through the slots (Note [One-copy collectives])
#include <gtest/gtest.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "braid/comm/chunking.h"
#include "braid/comm/collective_checks_test.h"
#include "braid/comm/mpi/mpi_group.h"
#include "braid/comm/world.h"
#include "testing/tensor_compare.h"

namespace braid::comm {
namespace {

// The world group of this process; set by main for the tests below.
ProcessGroup* world = nullptr;
bool one_copy = true;  // --no-one-copy: ProcessGroupOptions::one_copy off

// Whether this process can read the next rank's memory with process_vm_readv (the test's own
// look, beside the group's probe).
bool reads_next_rank() {
  static volatile int64_t word = 0;
  word = 1000 + world->rank();
  const int next = (world->rank() + 1) % world->size();
  int64_t mine[2] = {getpid(), static_cast<int64_t>(reinterpret_cast<uintptr_t>(&word))};
  std::vector<int64_t> all(2 * static_cast<size_t>(world->size()));
  const MPI_Comm comm = dynamic_cast<MpiGroup&>(*world).comm();
  MPI_Allgather(mine, 2, MPI_INT64_T, all.data(), 2, MPI_INT64_T, comm);
  int64_t got = 0;
  iovec local{&got, sizeof got};
  iovec remote{reinterpret_cast<void*>(all[2 * next + 1]), sizeof got};
  int ok = process_vm_readv(static_cast<pid_t>(all[2 * next]), &local, 1, &remote, 1, 0) ==
               static_cast<ssize_t>(sizeof got) &&
           got == 1000 + next;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
  return ok != 0;
}

TEST(Mpi, Backend) {
  EXPECT_EQ(world->size(), launched_world_size());
  const char* t = std::getenv("BRAID_COMM_TRANSPORT");
  // Across hosts (tests/multihost) the script says which backend the layout must give.
  const char* expect = std::getenv("BRAID_TEST_EXPECT_BACKEND");
  EXPECT_EQ(world->backend(), expect ? std::string(expect) : std::string("mpi/") + (t ? t : "shm"));
}

// Note [One-copy collectives] (shm/shm_one_copy.cpp): on one host a large broadcast is copied
// straight between the ranks' buffers where the kernel lets them read each other, unless the
// group was told not to; the checks below run on whichever path this gives.
TEST(Mpi, OneCopyWhereTheKernelLetsRanksReadEachOther) {
  const auto& g = dynamic_cast<MpiGroup&>(*world);
  const bool shm = world->backend() == "mpi/shm" && world->size() > 1;
  const bool readable = shm && reads_next_rank();
  EXPECT_EQ(g.peer_memory(), one_copy && readable ? PeerMemory::cma : PeerMemory::slots)
      << world->backend() << (readable ? ", process_vm_readv works" : "");
}

TEST(Mpi, AllReduce) {
  checks::all_reduce_every_op_and_type(*world);
}
TEST(Mpi, ReduceScatter) {
  checks::reduce_scatter_uneven_and_in_place(*world);
}
TEST(Mpi, AllGather) {
  checks::all_gather_uneven_and_in_place(*world);
}
TEST(Mpi, Broadcast) {
  checks::broadcast_from_every_root(*world);
}
TEST(Mpi, AllToAll) {
  checks::all_to_all_uneven(*world);
}
TEST(Mpi, SendRecv) {
  checks::send_recv_ring_both_orders(*world);
}
TEST(Mpi, InOrder) {
  checks::many_in_flight_complete_in_order(*world);
}

TEST(Mpi, SplitGroupsRunTheChecksToo) {
  auto half = world->split(world->rank() % 2, world->rank(), "parity");
  ASSERT_TRUE(half);
  EXPECT_EQ(half->size(), (world->size() + 1 - world->rank() % 2) / 2);
  checks::all_reduce_every_op_and_type(*half);
  checks::send_recv_ring_both_orders(*half);
}

// Note [Group memory]: the shm window share or the p2p staging is charged to the tracker,
// inherited by a split group and released when that group is destroyed.
TEST(Mpi, GroupMemoryIsChargedToTheTracker) {
  constexpr MemCategory kComm = MemCategory::communication;
  auto tracker =
      std::make_shared<MemoryTracker>("cpu (rank " + std::to_string(world->rank()) + ")");
  world->set_memory_tracker(tracker);
  const int64_t world_bytes = tracker->current(kComm);
  EXPECT_EQ(world_bytes, world->memory_bytes());
  {
    auto g = world->split(0, world->rank(), "memory");
    ASSERT_TRUE(g);
    EXPECT_EQ(g->memory_tracker(), tracker);
    const int64_t n = 10007;
    Tensor in = Tensor::full(Shape{n}, 1.0);
    Tensor out = Tensor::empty(Shape{chunk_of(n, g->size(), g->rank()).size});
    g->reduce_scatter(out, in)->wait();
    EXPECT_EQ(out.to_f32_vector()[0], static_cast<float>(g->size()));
    EXPECT_GT(g->memory_bytes(), 0) << g->backend();  // window share, or p2p staging
    EXPECT_EQ(tracker->current(kComm), world_bytes + g->memory_bytes());
    g->barrier()->wait();
  }
  EXPECT_EQ(tracker->current(kComm), world_bytes);
  world->set_memory_tracker(nullptr);
  EXPECT_EQ(tracker->current(kComm), 0);
}

// Rank r's contribution: values of mixed magnitudes, so that a change of fold order changes bits.
Tensor mixed(int r, int64_t n) {
  Rng rng(77 + r);
  Tensor x = Tensor::randn(Shape{n}, rng);
  float* p = x.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] *= (i % 5 == 0) ? 3e5f : 1e-2f;
  return x;
}

// The fold of every rank's mixed(r, n) in rank order.
std::vector<float> rank_ordered(ReduceOp op, int64_t n) {
  std::vector<float> want(n);
  for (int r = 0; r < world->size(); ++r) {
    auto v = mixed(r, n).to_f32_vector();
    for (int64_t i = 0; i < n; ++i)
      want[i] = r == 0 ? v[i] : op == ReduceOp::max ? std::max(want[i], v[i]) : want[i] + v[i];
  }
  if (op == ReduceOp::avg)
    for (float& w : want) w = w / static_cast<float>(world->size());
  return want;
}

// Note [Deterministic reduction]: the bits equal the rank-ordered f32 sum on every transport.
TEST(Mpi, DeterministicRankOrderedSum) {
  // Sizes of one and of several 1 MiB chunks (Note [Hierarchical all_reduce] pipelines those),
  // and across hosts (2 hosts x 2 ranks): one round (1003), the chain (Note [Chain across 2
  // hosts]: 12007, 16384 = 64 KiB, 20011, 65536 = 256 KiB on the issuing thread, 100003 and
  // 600011 on the comm thread, 8400007 in 2 segments).
  for (const int64_t n : {int64_t{1003}, int64_t{12007}, int64_t{16384}, int64_t{20011},
                          int64_t{65536}, int64_t{100003}, int64_t{600011}, int64_t{8400007}}) {
    for (const ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
      Tensor x = mixed(world->rank(), n);
      world->all_reduce(x, op)->wait();
      EXPECT_TRUE(braid::testing::bit_equal(x, Tensor::from_vector(rank_ordered(op, n), Shape{n})))
          << "n " << n << " op " << static_cast<int>(op);
    }
  }
}

// Past the inline limit (256 KiB), across 2 hosts x 2 ranks: reduce_scatter of 100003 floats
// in two steps (Note [Two-level small collectives]) and of 150011 direct, all_gather of 200003
// and 300007 in two steps; the bits of the rank-ordered fold, every element from its owner.
TEST(Mpi, ReduceScatterAndAllGatherPastTheInlineLimit) {
  for (const int64_t n : {int64_t{100003}, int64_t{150011}}) {
    const Chunk c = chunk_of(n, world->size(), world->rank());
    Tensor out = Tensor::empty(Shape{c.size});
    world->reduce_scatter(out, mixed(world->rank(), n), ReduceOp::sum)->wait();
    std::vector<float> want = rank_ordered(ReduceOp::sum, n);
    want = std::vector<float>(want.begin() + c.offset, want.begin() + c.offset + c.size);
    EXPECT_TRUE(braid::testing::bit_equal(out, Tensor::from_vector(want, Shape{c.size})))
        << "reduce_scatter n " << n;
  }
  for (const int64_t n : {int64_t{200003}, int64_t{300007}}) {
    const Chunk c = chunk_of(n, world->size(), world->rank());
    Tensor out = Tensor::zeros(Shape{n});
    world->all_gather(out, mixed(world->rank(), n).flat_range(c.offset, c.size))->wait();
    std::vector<float> want(n);
    for (int r = 0; r < world->size(); ++r) {
      const Chunk cr = chunk_of(n, world->size(), r);
      auto v = mixed(r, n).to_f32_vector();
      std::copy(v.begin() + cr.offset, v.begin() + cr.offset + cr.size, want.begin() + cr.offset);
    }
    EXPECT_TRUE(braid::testing::bit_equal(out, Tensor::from_vector(want, Shape{n})))
        << "all_gather n " << n;
  }
}

}  // namespace
}  // namespace braid::comm

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  braid::comm::ProcessGroupOptions options;
  options.name = "mpi-test";
  options.timeout = std::chrono::seconds(30);
  options.shm_slot_bytes = 4096;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--transport=", 12) == 0) {
      ::setenv("BRAID_COMM_TRANSPORT", argv[i] + 12, 1);
    } else if (std::strncmp(argv[i], "--slot-bytes=", 13) == 0) {
      options.shm_slot_bytes = std::strtoull(argv[i] + 13, nullptr, 10);
    } else if (std::strcmp(argv[i], "--no-one-copy") == 0) {
      options.one_copy = braid::comm::one_copy = false;
    }
  }
  auto world = braid::comm::init_world(options);
  braid::comm::world = world.get();
  int rc = RUN_ALL_TESTS();
  braid::comm::world = nullptr;
  world.reset();
  return rc;
}
