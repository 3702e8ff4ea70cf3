// NcclGroup on one GPU: world size 1, bootstrapped through a LocalGroup. One process cannot hold
// two NCCL ranks on the same GPU, so the multi-rank paths (uneven chunks through per-rank
// broadcasts and reduces, the send/recv lanes) are exercised only on several GPUs; here they
// are the world-1 cases of the same code. Every test skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "braid/comm/device_group.h"
#include "braid/comm/local/local_group.h"
#include "braid/comm/nccl/nccl_group.h"
#include "braid/kernels/device.h"

namespace braid::comm {
namespace {

Device gpu() {
  return Device{DeviceType::cuda, 0};
}

bool have_gpu() {
  int n = 0;
  // device_supported also links the CUDA device backend in (Tensor::to(cuda) needs it).
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0 &&
         kernels::device_supported(DeviceType::cuda);
}

#define BRAID_REQUIRE_NCCL_GPU()                                                         \
  do {                                                                                   \
    if (!have_gpu())                                                                     \
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount reports 0): NCCL needs a GPU"; \
  } while (0)

std::shared_ptr<ProcessGroup> make_world1(const std::string& name = "nccl") {
  auto boot = LocalGroup::create(1);
  ProcessGroupOptions options;
  options.name = name;
  options.timeout = std::chrono::seconds(60);
  return make_nccl_group(*boot[0], 0, options);  // the CUDA backend's stream by default
}

// n values -3, -2, ... in dtype, on the GPU.
Tensor ramp(int64_t n, DType dtype) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i % 11 - 3);
  if (dtype == DType::u8)
    for (auto& x : v) x = x < 0 ? -x : x;
  return Tensor::from_vector<float>(v, Shape{n}).to(dtype).to(gpu());
}

std::vector<float> host(const Tensor& t) {
  return t.to(Device::cpu()).to_f32_vector();
}

class NcclGroupTest : public ::testing::Test {
 protected:
  void SetUp() override { BRAID_REQUIRE_NCCL_GPU(); }
};

TEST_F(NcclGroupTest, CreatesAWorldOfOne) {
  auto g = make_world1();
  EXPECT_EQ(g->backend(), "nccl");
  EXPECT_EQ(g->rank(), 0);
  EXPECT_EQ(g->size(), 1);
  g->barrier()->wait();
}

TEST_F(NcclGroupTest, AllReduceOfOneRankIsTheInput) {
  auto g = make_world1();
  for (DType dtype : {DType::f32, DType::bf16, DType::i64}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
      Tensor t = ramp(1000, dtype);
      const auto want = host(t);
      g->all_reduce(t, op)->wait();
      EXPECT_EQ(host(t), want) << dtype_name(dtype) << " " << reduce_op_name(op);
    }
  }
}

TEST_F(NcclGroupTest, ReduceScatterAllGatherRoundTrip) {
  auto g = make_world1();
  for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8}) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1001}}) {
      Tensor in = ramp(n, dtype);
      Tensor part = Tensor::zeros(Shape{n}, dtype).to(gpu());
      g->reduce_scatter(part, in)->wait();
      Tensor out = Tensor::zeros(Shape{n}, dtype).to(gpu());
      g->all_gather(out, part)->wait();
      EXPECT_EQ(host(out), host(in)) << dtype_name(dtype) << " n " << n;
    }
  }
}

TEST_F(NcclGroupTest, InPlaceReduceScatterAndAllGather) {
  auto g = make_world1();
  Tensor t = ramp(13, DType::f32);
  const auto want = host(t);
  g->reduce_scatter(t.flat_range(0, 13), t)->wait();
  g->all_gather(t, t.flat_range(0, 13))->wait();
  EXPECT_EQ(host(t), want);
}

TEST_F(NcclGroupTest, BroadcastAndAllToAll) {
  auto g = make_world1();
  Tensor t = ramp(5, DType::bf16);
  const auto want = host(t);
  g->broadcast(t, 0)->wait();
  EXPECT_EQ(host(t), want);

  Tensor in = ramp(9, DType::i32);
  Tensor out = Tensor::zeros(Shape{9}, DType::i32).to(gpu());
  g->all_to_all(out, in)->wait();
  EXPECT_EQ(host(out), host(in));
}

TEST_F(NcclGroupTest, SendToSelfIsRefusedByTheGroup) {
  // NCCL could pair a send and a recv to self inside one ncclGroup, but braid's send/recv take
  // another rank (ProcessGroup::send): at world size 1 there is none to exercise p2p with.
  auto g = make_world1();
  Tensor t = ramp(4, DType::f32);
  EXPECT_THROW(g->send(t, 0), CommError);
  EXPECT_THROW(g->recv(t, 0), CommError);
}

// Note [Device staging]: host tensors (the pipeline's headers and the like) go through device
// buffers, alone or beside a device tensor.
TEST_F(NcclGroupTest, HostTensorsAreStagedThroughTheDevice) {
  auto g = make_world1();
  Tensor t = Tensor::from_vector<int64_t>({5, -2, 9}, Shape{3});  // on the CPU
  g->all_reduce(t, ReduceOp::sum)->wait();
  EXPECT_EQ(t.to_f32_vector(), (std::vector<float>{5, -2, 9}));
  Tensor host_in = Tensor::from_vector<float>({1.5f, 2.5f}, Shape{2});
  Tensor device_out = Tensor::zeros(Shape{2}, DType::f32).to(gpu());
  g->all_gather(device_out, host_in)->wait();
  EXPECT_EQ(host(device_out), (std::vector<float>{1.5f, 2.5f}));
  EXPECT_GT(g->memory_bytes(), 0);
}

// Note [Device groups]: linking braid_nccl registers it for cuda.
TEST_F(NcclGroupTest, IsTheRegisteredDeviceGroupForCuda) {
  EXPECT_EQ(device_group_backend(DeviceType::cuda), "nccl");
  auto boot = LocalGroup::create(1);
  auto g = make_device_group(*boot[0], gpu(), {.name = "world/nccl"});
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->backend(), "nccl");
  EXPECT_EQ(g->home_device(), gpu());
  Tensor t = ramp(10, DType::bf16);
  const auto want = host(t);
  g->all_reduce(t)->wait();
  EXPECT_EQ(host(t), want);
}

TEST_F(NcclGroupTest, WaitsForTheComputeStreamAndOrdersItAfter) {
  auto g = make_world1();
  const int64_t n = int64_t{1} << 24;  // 64 MiB: the copy below is still running when issued
  Tensor src = Tensor::zeros(Shape{n}, DType::f32).to(gpu());
  src.fill_(3.0);
  Tensor in = Tensor::zeros(Shape{n}, DType::f32).to(gpu());
  Tensor out = Tensor::zeros(Shape{n}, DType::f32).to(gpu());
  in.copy_(src);  // device to device: only enqueued on braid's compute stream
  g->reduce_scatter(out, in)->wait();
  // Queued on the compute stream after the collective: must see its result.
  Tensor after = Tensor::zeros(Shape{n}, DType::f32).to(gpu());
  after.copy_(out);
  const auto got = host(after);
  int64_t wrong = 0;
  for (float x : got) wrong += x != 3.0f;
  EXPECT_EQ(wrong, 0);
}

TEST_F(NcclGroupTest, SplitGivesAWorkingGroup) {
  auto g = make_world1();
  auto none = g->split(-1, 0);
  EXPECT_EQ(none, nullptr);
  auto sub = g->split(0, g->rank(), "nccl/sub");
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->backend(), "nccl");
  EXPECT_EQ(sub->size(), 1);
  EXPECT_EQ(sub->name(), "nccl/sub");
  Tensor t = ramp(33, DType::f32);
  const auto want = host(t);
  sub->all_reduce(t, ReduceOp::sum)->wait();
  EXPECT_EQ(host(t), want);
  g->barrier()->wait();  // the parent still works
}

TEST_F(NcclGroupTest, ScratchIsChargedToCommunication) {
  auto g = make_world1();
  EXPECT_GT(g->memory_bytes(), 0);
  auto tracker = std::make_shared<MemoryTracker>();
  g->set_memory_tracker(tracker);
  EXPECT_EQ(tracker->current(MemCategory::communication), g->memory_bytes());
}

}  // namespace
}  // namespace braid::comm
