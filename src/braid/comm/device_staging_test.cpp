// Note [Device staging]: every operation of a local group on tensors of the simulated device
// (Note [Simulated device]: host code touching them outside a kernel throws) gives the bits of
// the same operation on host tensors, in place or not, and charges its host buffers to the
// communication category. A group whose home is the device (Note [Device groups]: NCCL, here
// the simulated device's group) stages host tensors onto it the same way.
#include <gtest/gtest.h>

#include "braid/comm/chunking.h"
#include "braid/comm/device_group.h"
#include "braid/comm/local/local_group.h"
#include "braid/comm/process_group.h"
#include "braid/core/device_backend.h"
#include "testing/run_ranks.h"
#include "testing/simulated_device.h"
#include "testing/simulated_device_group.h"
#include "testing/tensor_compare.h"

namespace braid::comm {
namespace {

using braid::testing::bit_equal;
using braid::testing::run_ranks;

using DeviceStaging = braid::testing::SimulatedDeviceTest;

const Device kDev{DeviceType::cuda, 0};

// Data whose sum depends on the order of additions, different on every rank.
Tensor noisy(int64_t n, int rank, DType t) {
  Rng rng(77 + rank);
  Tensor x = Tensor::randn(Shape{n}, rng, 1.0f);
  float* p = x.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] *= (i % 5 == 0) ? 1e5f : 1e-3f;
  return x.to(t);
}

Tensor host(const Tensor& t) {
  return t.to(Device::cpu());
}

TEST_F(DeviceStaging, CollectivesOnDeviceTensorsEqualTheHostOnes) {
  run_ranks(2, [](ProcessGroup& g) {
    for (DType t : {DType::f32, DType::bf16, DType::i64}) {
      SCOPED_TRACE(dtype_name(t));
      const int64_t n = 1001;  // uneven chunks, several shm steps
      const Chunk c = chunk_of(n, g.size(), g.rank());
      const Tensor x =
          t == DType::i64 ? Tensor::full(Shape{n}, 3 + g.rank(), t) : noisy(n, g.rank(), t);
      // all_reduce
      Tensor h = x.clone(), d = x.to(kDev);
      g.all_reduce(h)->wait();
      g.all_reduce(d)->wait();
      EXPECT_EQ(d.device(), kDev);
      EXPECT_TRUE(bit_equal(host(d), h)) << "all_reduce";
      // reduce_scatter, out of place and in place
      Tensor hs = Tensor::empty(Shape{c.size}, t, Device::cpu());
      Tensor ds = Tensor::empty(Shape{c.size}, t, kDev);
      g.reduce_scatter(hs, x)->wait();
      g.reduce_scatter(ds, x.to(kDev))->wait();
      EXPECT_TRUE(bit_equal(host(ds), hs)) << "reduce_scatter";
      Tensor din = x.to(kDev);
      g.reduce_scatter(din.flat_range(c.offset, c.size), din)->wait();
      EXPECT_TRUE(bit_equal(host(din.flat_range(c.offset, c.size)), hs)) << "in place";
      // all_gather, out of place and in place
      Tensor hg = Tensor::empty(Shape{n}, t, Device::cpu());
      g.all_gather(hg, hs)->wait();
      Tensor dg = Tensor::empty(Shape{n}, t, kDev);
      g.all_gather(dg, ds)->wait();
      EXPECT_TRUE(bit_equal(host(dg), hg)) << "all_gather";
      g.all_gather(din, din.flat_range(c.offset, c.size))->wait();
      EXPECT_TRUE(bit_equal(host(din), hg)) << "all_gather in place";
      EXPECT_TRUE(bit_equal(hg, h)) << "reduce_scatter + all_gather = all_reduce";
      // broadcast from rank 1
      Tensor hb = x.clone(), db = x.to(kDev);
      g.broadcast(hb, 1)->wait();
      g.broadcast(db, 1)->wait();
      EXPECT_TRUE(bit_equal(host(db), hb)) << "broadcast";
      // all_to_all
      Tensor ha = Tensor::empty(Shape{c.size * g.size()}, t, Device::cpu());
      Tensor da = Tensor::empty(Shape{c.size * g.size()}, t, kDev);
      g.all_to_all(ha, x)->wait();
      g.all_to_all(da, x.to(kDev))->wait();
      EXPECT_TRUE(bit_equal(host(da), ha)) << "all_to_all";
    }
  });
}

TEST_F(DeviceStaging, SendsAndRecvsOfDeviceTensorsArriveInOrder) {
  run_ranks(2, [](ProcessGroup& g) {
    const int peer = 1 - g.rank();
    std::vector<std::shared_ptr<Work>> works;
    std::vector<Tensor> got;
    // Two messages each way with one tag, a third with another, device and host mixed.
    for (int k = 0; k < 3; ++k) {
      Tensor msg = Tensor::full(Shape{300}, 10 * g.rank() + k, DType::bf16);
      works.push_back(g.send(k == 1 ? msg : msg.to(kDev), peer, k == 2 ? 5 : 0));
    }
    for (int k = 0; k < 3; ++k) {
      got.push_back(Tensor::empty(Shape{300}, DType::bf16, k == 0 ? Device::cpu() : kDev));
      works.push_back(g.recv(got.back(), peer, k == 2 ? 5 : 0));
    }
    for (auto& w : works) w->wait();
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(got[k].device(), k == 0 ? Device::cpu() : kDev);
      EXPECT_EQ(host(got[k]).to_f32_vector(), std::vector<float>(300, 10.0f * peer + k)) << k;
    }
  });
}

TEST_F(DeviceStaging, HostBuffersAreChargedToCommunication) {
  auto groups = LocalGroup::create(1);
  auto tracker = std::make_shared<MemoryTracker>("cpu (rank 0)");
  groups[0]->set_memory_tracker(tracker);
  const int64_t before = tracker->current(MemCategory::communication);
  Tensor d = Tensor::full(Shape{1 << 16}, 2.0).to(kDev);  // 256 KiB
  groups[0]->all_reduce(d)->wait();
  EXPECT_EQ(tracker->current(MemCategory::communication), before + (int64_t{1} << 18));
  // Kept for the next operation of that size or less; a larger one grows it.
  groups[0]->all_reduce(d.flat_range(0, 100))->wait();
  EXPECT_EQ(groups[0]->memory_bytes(), before + (int64_t{1} << 18));
  EXPECT_EQ(host(d).to_f32_vector()[5], 2.0f);
  groups.clear();
  EXPECT_EQ(tracker->current(MemCategory::communication), 0);
}

// Note [Device groups]: where none is registered for the device, the caller keeps its host group.
TEST_F(DeviceStaging, NoDeviceGroupWhereNoneIsRegistered) {
  braid::testing::unregister_simulated_device_group();
  EXPECT_EQ(device_group_backend(DeviceType::cuda), "");
  auto groups = LocalGroup::create(1);
  EXPECT_EQ(make_device_group(*groups[0], kDev, {}), nullptr);
}

// A device group (home: the rank's device) given host tensors stages them onto its device:
// collectives, in place and mixed with device tensors, sends and recvs, and its splits; a
// tensor on another device is refused, naming both.
TEST_F(DeviceStaging, DeviceGroupStagesHostTensorsOntoItsDevice) {
  braid::testing::register_simulated_device_group();
  run_ranks(2, [](ProcessGroup& g) {
    auto dg = make_device_group(g, kDev, {.name = "world/simulated"});
    ASSERT_NE(dg, nullptr);
    EXPECT_EQ(dg->home_device(), kDev);
    EXPECT_EQ(dg->backend(), "simulated");
    const int64_t n = 1001;
    const Chunk c = chunk_of(n, g.size(), g.rank());
    const Tensor x = noisy(n, g.rank(), DType::f32);
    Tensor want = x.clone();
    g.all_reduce(want)->wait();
    Tensor h = x.clone();
    dg->all_reduce(h)->wait();
    EXPECT_EQ(h.device(), Device::cpu());
    EXPECT_TRUE(bit_equal(h, want)) << "all_reduce";
    Tensor hin = x.clone();  // in place: the result lands in hin's chunk
    dg->reduce_scatter(hin.flat_range(c.offset, c.size), hin)->wait();
    Tensor dout = Tensor::empty(Shape{n}, DType::f32, kDev);
    dg->all_gather(dout, hin.flat_range(c.offset, c.size))->wait();  // host in, device out
    EXPECT_TRUE(bit_equal(host(dout), want)) << "reduce_scatter + all_gather";
    Tensor hb = Tensor::full(Shape{7}, g.rank() + 1, DType::i64);
    dg->broadcast(hb, 1)->wait();
    EXPECT_EQ(hb.to_f32_vector(), std::vector<float>(7, 2.0f));
    const int peer = 1 - g.rank();
    Tensor got = Tensor::empty(Shape{300}, DType::bf16, Device::cpu());
    auto sent = dg->send(Tensor::full(Shape{300}, 10 + g.rank(), DType::bf16), peer, 3);
    dg->recv(got, peer, 3)->wait();
    sent->wait();
    EXPECT_EQ(got.to_f32_vector(), std::vector<float>(300, 10.0f + peer)) << "send/recv";
    auto sub = dg->split(0, g.rank(), "world/simulated/sub");
    ASSERT_NE(sub, nullptr);
    EXPECT_EQ(sub->home_device(), kDev);
    Tensor s = x.clone();
    sub->all_reduce(s)->wait();
    EXPECT_TRUE(bit_equal(s, want)) << "split";
    const Device other{DeviceType::cuda, 1};
    try {
      dg->all_reduce(Tensor::full(Shape{4}, 1.0).to(other))->wait();
      ADD_FAILURE() << "a tensor on cuda:1 was taken by the cuda:0 group";
    } catch (const CommError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("cuda:1"), std::string::npos) << what;
      EXPECT_NE(what.find("cuda:0"), std::string::npos) << what;
    }
  });
  braid::testing::unregister_simulated_device_group();
}

}  // namespace
}  // namespace braid::comm
