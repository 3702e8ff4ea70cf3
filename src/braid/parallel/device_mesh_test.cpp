#include "braid/parallel/device_mesh.h"

#include <gtest/gtest.h>

#include "testing/run_ranks.h"

namespace braid::parallel {
namespace {

using braid::testing::run_ranks;

// The sum of world ranks over a group, by all_reduce: names exactly which ranks are in it.
float sum_of_ranks(comm::ProcessGroup& g, int world_rank) {
  Tensor x = Tensor::full(Shape{1}, world_rank);
  g.all_reduce(x)->wait();
  return x.item();
}

TEST(DeviceMesh, PipelineDataTensorGroups) {
  run_ranks(
      8,
      [](comm::ProcessGroup& world) {
        DeviceMesh mesh = DeviceMesh::training(world.split(0, world.rank(), "w"),
                                               {.dp_shard = 2, .pp = 2, .tp = 2});
        const int r = world.rank();
        EXPECT_EQ(mesh.coord("dp"), r / 4);
        EXPECT_EQ(mesh.coord("dp_shard"), r / 4);
        EXPECT_EQ(mesh.size("dp_replicate"), 1);
        EXPECT_EQ(mesh.coord("pp"), (r / 2) % 2);
        EXPECT_EQ(mesh.coord("tp"), r % 2);
        EXPECT_EQ(mesh.group("tp").size(), 2);
        EXPECT_EQ(mesh.group("tp").rank(), r % 2);
        // tp peers are adjacent ranks; pp peers are 2 apart; dp peers 4 apart.
        EXPECT_EQ(sum_of_ranks(mesh.group("tp"), r), (r - r % 2) * 2 + 1);
        int pp_base = r - ((r / 2) % 2) * 2;
        EXPECT_EQ(sum_of_ranks(mesh.group("pp"), r), pp_base * 2 + 2);
        EXPECT_EQ(sum_of_ranks(mesh.group("dp"), r), (r % 4) * 2 + 4);
        EXPECT_EQ(mesh.rank_of({0, mesh.coord("dp"), mesh.coord("pp"), 0, mesh.coord("tp")}), r);
        comm::ProcessGroup& mp = mesh.group("mp");  // the 4 ranks of one replica
        EXPECT_EQ(mp.size(), 4);
        EXPECT_EQ(mp.rank(), r % 4);
        EXPECT_EQ(mesh.coord("mp"), r % 4);
        // Note [Mesh groups]: dp is dp_shard's group (dp_replicate is 1), and a one-rank
        // group is this rank alone.
        EXPECT_EQ(&mesh.group("dp"), &mesh.group("dp_shard"));
        EXPECT_EQ(mesh.group("dp_replicate").size(), 1);
        EXPECT_THROW(mesh.group("ep"), Error);
      },
      {.group = braid::testing::RunRanksOptions::default_group(),
       .limit = std::chrono::seconds(120)});
}

// Note [Context-parallel layout]: the cp ranks sit between pp and tp; data parallelism reduces
// and shards over dp x cp, while the batch is split over dp alone.
TEST(DeviceMesh, ContextParallelRanksJoinTheDataParallelGroups) {
  run_ranks(8, [](comm::ProcessGroup& world) {
    DeviceMesh mesh =
        DeviceMesh::training(world.split(0, world.rank(), "w"), {.dp_shard = 2, .cp = 2, .tp = 2});
    const int r = world.rank();
    EXPECT_EQ(mesh.coord("cp"), (r / 2) % 2);
    EXPECT_EQ(sum_of_ranks(mesh.group("cp"), r), (r - ((r / 2) % 2) * 2) * 2 + 2);
    EXPECT_EQ(mesh.size("dp"), 4);  // dp_shard x cp
    EXPECT_EQ(mesh.coord("dp"), r / 2);
    EXPECT_EQ(sum_of_ranks(mesh.group("dp"), r), (r % 2) * 4 + 12);  // {0,2,4,6} or {1,3,5,7}
    EXPECT_EQ(&mesh.group("dp_shard_cp"), &mesh.group("dp"));
    EXPECT_EQ(mesh.size("batch"), 2);
    EXPECT_EQ(mesh.coord("batch"), r / 4);
    EXPECT_EQ(mesh.group("mp").size(), 2);  // pp x tp: the cp ranks hold the same parameters
  });
}

TEST(DeviceMesh, HybridShardSplitsDpIntoShardAndReplicate) {
  run_ranks(4, [](comm::ProcessGroup& world) {
    DeviceMesh mesh =
        DeviceMesh::training(world.split(0, world.rank(), "w"), {.dp_replicate = 2, .dp_shard = 2});
    const int r = world.rank();
    EXPECT_EQ(mesh.size("dp"), 4);
    EXPECT_EQ(mesh.coord("dp"), r);
    EXPECT_EQ(mesh.group("dp_shard").size(), 2);
    EXPECT_EQ(sum_of_ranks(mesh.group("dp_shard"), r), r < 2 ? 1 : 5);      // {0,1} {2,3}
    EXPECT_EQ(sum_of_ranks(mesh.group("dp_replicate"), r), r % 2 ? 4 : 2);  // {0,2} {1,3}
    EXPECT_EQ(sum_of_ranks(mesh.group("dp"), r), 6);
    EXPECT_EQ(mesh.group("dp").rank(), r);
    // The world's own group where a dimension spans it: no split.
    EXPECT_EQ(mesh.group("mp").size(), 1);
  });
}

TEST(DeviceMesh, AGroupThatIsTheWorldIsTheWorld) {
  run_ranks(4, [](comm::ProcessGroup& world) {
    auto w = world.split(0, world.rank(), "w");
    DeviceMesh mesh = DeviceMesh::training(w, {.dp_shard = 4});
    EXPECT_EQ(mesh.group_ptr("dp"), w);
    EXPECT_EQ(mesh.group_ptr("dp_shard"), w);
    EXPECT_EQ(mesh.size("mp"), 1);
  });
}

TEST(DeviceMesh, SizesMustMultiplyToTheWorld) {
  run_ranks(2, [](comm::ProcessGroup& world) {
    auto w = world.split(0, world.rank(), "w");
    try {
      DeviceMesh mesh(w, {{"dp", 3}});
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("multiply to 3 but the world has 2"), std::string::npos)
          << e.what();
    }
  });
}

}  // namespace
}  // namespace braid::parallel
