// Several ranks on a device as real processes under mpirun (Note [Training device]): each rank
// trains on its own simulated device, cuda:<local rank> (Note [Simulated device]), over the
// device's own group made on the MPI world (Note [Device groups]: the simulated device's group
// in NCCL's place) or over the MPI world itself, which stages device tensors through host
// memory (parallel.comm_backend host). Either gives the CPU run's weights bit for bit, on every
// rank: data parallel (DDP, ZeRO-3), a zb_v pipeline and tensor parallelism.
#include <gtest/gtest.h>

#include <cstdlib>

#include "braid/core/device_backend.h"
#include "testing/simulated_device_group.h"
#include "testing/train/device_ranks_util.h"
#include "testing/train/mpi_test_world.h"
#include "testing/train/tensor_parallel_parity_util.h"

namespace braid::train {
namespace {

using braid::testing::bit_equal;

// c trained on every rank of the MPI world on `device` with `backend`: this rank's gathered
// weights on the host (every rank the same).
Tensor train_mpi(config::TrainConfig c, const std::string& device,
                 const std::string& backend = "auto") {
  c.training.device = device;
  c.parallel.comm_backend = backend;
  Trainer t(c, mpi_test_world(), quiet());
  if (device != "cpu") {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    const Device mine{DeviceType::cuda, local ? std::atoi(local) : 0};
    EXPECT_EQ(t.device(), mine) << "rank " << mpi_test_world()->rank();
  }
  t.run();
  Tensor w = t.gather_parameters().to(Device::cpu());
  EXPECT_TRUE(same_on_every_rank(w)) << device << " " << backend;
  return w;
}

// The CPU run, the device over the device group and the device over the host world, alike.
void expect_device_runs_equal_the_cpu(const config::TrainConfig& c, const std::string& what) {
  const int64_t made = braid::testing::simulated_device_groups_made();
  const Tensor cpu = train_mpi(c, "cpu");
  EXPECT_TRUE(bit_equal(train_mpi(c, "cuda"), cpu)) << what << " over the device group";
  EXPECT_GT(braid::testing::simulated_device_groups_made(), made) << what;
  const int64_t after = braid::testing::simulated_device_groups_made();
  EXPECT_TRUE(bit_equal(train_mpi(c, "cuda", "host"), cpu)) << what << " over MPI";
  EXPECT_EQ(braid::testing::simulated_device_groups_made(), after) << what;
}

TEST(DeviceRanksMpi, DataParallelGivesTheCpuWeightsBitForBit) {
  for (const char* strategy : {"ddp", "zero3"}) {
    config::TrainConfig c = parity_config("true");
    c.parallel.strategy = strategy;
    expect_device_runs_equal_the_cpu(c, strategy);
  }
}

TEST(DeviceRanksMpi, PipelineAndTensorParallelGiveTheCpuWeightsBitForBit) {
  const int n = mpi_test_world()->size();
  PipelineLayout l;
  l.pp = n;
  l.schedule = "zb_v";
  l.chunks = 2;
  config::TrainConfig pp = pp_parity_config(l);
  pp.training.max_steps = 2;
  expect_device_runs_equal_the_cpu(pp, "zb_v pp " + std::to_string(n));
  expect_device_runs_equal_the_cpu(tp_parity_config("gpt2-tiny", n, true, "none"),
                                   "tp " + std::to_string(n) + " sp");
}

}  // namespace
}  // namespace braid::train

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!braid::register_simulated_device()) {
    std::fprintf(stderr, "device_ranks_mpi_test: a real CUDA backend is registered; skipped\n");
    return 77;
  }
  braid::testing::register_simulated_device_group();
  braid::train::mpi_test_world();
  return RUN_ALL_TESTS();
}
