// What a group holds is charged to its tracker's communication category (Note [Group
// memory], process_group.h): the local backend's shared arena (a share per rank), buffered
// sends (to the sender until received), inherited by split groups, released on destruction.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "braid/comm/local/local_group.h"
#include "braid/comm/shm/shm_engine.h"
#include "testing/run_ranks.h"

namespace braid::comm {
namespace {

using braid::testing::run_ranks;

constexpr MemCategory kComm = MemCategory::communication;

std::vector<std::shared_ptr<MemoryTracker>> trackers(int n) {
  std::vector<std::shared_ptr<MemoryTracker>> t;
  for (int r = 0; r < n; ++r)
    t.push_back(std::make_shared<MemoryTracker>("cpu (rank " + std::to_string(r) + ")"));
  return t;
}

TEST(GroupMemory, LocalArenaIsChargedAsSharesAndReleasedWithTheGroup) {
  ProcessGroupOptions options;
  options.shm_slot_bytes = 64 << 10;
  auto groups = LocalGroup::create(3, options);
  auto t = trackers(3);
  const auto arena = static_cast<int64_t>(ShmEngine::arena_bytes(3, 64 << 10));
  int64_t sum = 0;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(t[r]->current(kComm), 0);
    groups[r]->set_memory_tracker(t[r]);  // charges what the group already holds
    EXPECT_EQ(groups[r]->memory_tracker(), t[r]);
    EXPECT_GT(t[r]->current(kComm), 0);
    EXPECT_EQ(t[r]->current(kComm), groups[r]->memory_bytes());
    sum += t[r]->current(kComm);
  }
  EXPECT_EQ(sum, arena);  // every byte of the shared arena, charged once

  // A collective larger than a slot runs in steps through the arena and keeps nothing more.
  std::vector<Tensor> data;
  std::vector<std::shared_ptr<Work>> work;
  for (int r = 0; r < 3; ++r) {
    data.push_back(Tensor::full(Shape{100000}, r + 1.0));
    work.push_back(groups[r]->all_reduce(data[r]));
  }
  for (auto& w : work) w->wait();
  EXPECT_EQ(data[2].to_f32_vector()[12345], 6.0f);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(t[r]->current(kComm), groups[r]->memory_bytes());

  groups.clear();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(t[r]->current(kComm), 0) << "rank " << r;
    EXPECT_EQ(t[r]->peak(kComm), arena / 3 + (r < arena % 3 ? 1 : 0)) << "rank " << r;
  }
}

TEST(GroupMemory, BufferedSendIsChargedToTheSenderUntilReceived) {
  auto groups = LocalGroup::create(2);
  auto t = trackers(2);
  for (int r = 0; r < 2; ++r) groups[r]->set_memory_tracker(t[r]);
  const int64_t held0 = groups[0]->memory_bytes(), held1 = groups[1]->memory_bytes();
  Tensor msg = Tensor::full(Shape{1 << 18}, 3.0);  // 1 MiB
  groups[0]->send(msg, 1, 7)->wait();              // buffered: done before any recv
  EXPECT_EQ(t[0]->current(kComm), held0 + (int64_t{1} << 20));
  EXPECT_EQ(t[1]->current(kComm), held1);
  Tensor got = Tensor::zeros(Shape{1 << 18});
  groups[1]->recv(got, 0, 7)->wait();
  EXPECT_EQ(got.to_f32_vector()[1000], 3.0f);
  EXPECT_EQ(t[0]->current(kComm), held0);
  EXPECT_EQ(t[0]->peak(kComm), held0 + (int64_t{1} << 20));
}

TEST(GroupMemory, SplitGroupsInheritTheParentsTracker) {
  auto t = trackers(4);
  run_ranks(4, [&](ProcessGroup& g) {
    auto& mine = t[g.rank()];
    g.set_memory_tracker(mine);
    const int64_t parent = mine->current(kComm);
    EXPECT_EQ(parent, g.memory_bytes());
    auto child = g.split(g.rank() % 2, g.rank());
    ASSERT_TRUE(child);
    EXPECT_EQ(child->memory_tracker(), mine);
    EXPECT_GT(child->memory_bytes(), 0);
    EXPECT_EQ(mine->current(kComm), parent + child->memory_bytes());
    // A tracker set on the parent later stays with the parent.
    auto later = std::make_shared<MemoryTracker>();
    g.set_memory_tracker(later);
    EXPECT_EQ(later->current(kComm), parent);
    EXPECT_EQ(child->memory_tracker(), mine);
    EXPECT_EQ(mine->current(kComm), child->memory_bytes());
    g.barrier()->wait();  // every rank has checked before any child is destroyed
    child.reset();
    EXPECT_EQ(mine->current(kComm), 0);
  });
}

TEST(GroupMemory, NoTrackerChargesNothingAndABudgetRefusesTheTracker) {
  auto groups = LocalGroup::create(2);
  EXPECT_EQ(groups[0]->memory_tracker(), nullptr);
  EXPECT_GT(groups[0]->memory_bytes(), 0);  // held, charged nowhere
  auto small = std::make_shared<MemoryTracker>("cpu (rank 0)");
  small->set_budget(1024);
  EXPECT_THROW(groups[0]->set_memory_tracker(small), OutOfMemory);
  EXPECT_EQ(groups[0]->memory_tracker(), nullptr);  // unchanged
  EXPECT_EQ(small->total_current(), 0);
  auto big = std::make_shared<MemoryTracker>();
  groups[0]->set_memory_tracker(big);
  groups[0]->set_memory_tracker(nullptr);  // moves it off again
  EXPECT_EQ(big->current(kComm), 0);
  EXPECT_EQ(big->peak(kComm), groups[0]->memory_bytes());
}

}  // namespace
}  // namespace braid::comm
