// Bad input to kernels throws braid::Error naming the argument, the place and the numbers.
#include <gtest/gtest.h>

#include <string>

#include "braid/kernels/device.h"
#include "braid/kernels/ops.h"
#include "testing/simulated_device.h"

namespace braid::kernels {
namespace {

// Runs fn, expects braid::Error, and checks that the message holds every part.
template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << msg << "\n  missing: " << p;
  }
}

TEST(KernelErrors, EmbeddingIdOutOfRangeNamesOffsetIdAndVocab) {
  Tensor ids = Tensor::from_vector<int32_t>({1, 2, 3, 4, 5, 999}, Shape{2, 3});
  Tensor wte = Tensor::zeros(Shape{10, 4}), out = Tensor::empty(Shape{2, 3, 4});
  expect_error([&] { embedding_forward(out, ids, wte, nullptr); },
               {"embedding_forward", "999", "position 5", "vocab size 10"});
  ids.data<int32_t>()[5] = -1;
  Tensor dwte = Tensor::zeros(Shape{10, 4});
  expect_error([&] { embedding_backward(&dwte, nullptr, out, ids); },
               {"embedding_backward", "-1", "position 5", "vocab size 10"});
}

TEST(KernelErrors, CrossEntropyTargetOutOfRange) {
  Tensor x = Tensor::zeros(Shape{3, 4}), w = Tensor::zeros(Shape{8, 4});
  Tensor tg = Tensor::from_vector<int32_t>({0, 8, -100}, Shape{3}), lse = Tensor::empty(Shape{3});
  int64_t count = 0;
  expect_error([&] { lm_head_ce_forward(lse, &count, x, w, tg); },
               {"lm_head_ce_forward", "target id 8", "position 1", "vocab size 8"});
}

TEST(KernelErrors, VocabSlicesNameOpAndArgument) {
  Tensor ids = Tensor::from_vector<int32_t>({1, 2, 300, -4}, Shape{1, 4});  // 300: another slice
  Tensor wte = Tensor::zeros(Shape{10, 4}), out = Tensor::empty(Shape{1, 4, 4});
  expect_error([&] { embedding_slice_forward(out, ids, wte, 10); },
               {"embedding_slice_forward", "-4", "position 3", "negative"});
  ids.data<int32_t>()[3] = 0;
  expect_error([&] { embedding_slice_backward(wte, out, ids, -1); },
               {"embedding_slice_backward", "v0=-1"});
  Tensor x = Tensor::zeros(Shape{3, 4}), w = Tensor::zeros(Shape{8, 4});
  Tensor tg = Tensor::from_vector<int32_t>({0, 99, -100}, Shape{3});  // 99: another slice
  Tensor m = Tensor::empty(Shape{3}), s = Tensor::empty(Shape{3}), tl = Tensor::empty(Shape{2});
  expect_error([&] { lm_head_ce_partial_forward(m, s, tl, x, w, tg, 8, 8); },
               {"lm_head_ce_partial_forward", "target_logit"});
  tl = Tensor::empty(Shape{3});
  expect_error([&] { lm_head_ce_partial_forward(m, s, tl, x, w, tg, 8, 9); },
               {"lm_head_ce_partial_forward", "valid=9", "[0, 8]"});
  tg.data<int32_t>()[1] = -3;
  expect_error([&] { lm_head_ce_partial_backward(&x, &w, x, w, tg, m, 1.0f, 8, 8); },
               {"lm_head_ce_partial_backward", "target id -3", "position 1", "negative"});
}

TEST(KernelErrors, ShapeMismatchNamesShapes) {
  Tensor x = Tensor::zeros(Shape{4, 5}), w = Tensor::zeros(Shape{3, 6});
  Tensor out = Tensor::empty(Shape{4, 3});
  expect_error([&] { linear_forward(out, x, w, nullptr); }, {"linear_forward", "[4, 5]", "[3, 6]"});
  Tensor a = Tensor::zeros(Shape{2, 3}), b = Tensor::zeros(Shape{4, 5}),
         c = Tensor::zeros(Shape{2, 5});
  expect_error([&] { matmul(c, a, b, false, false); }, {"matmul", "[2, 3]", "[4, 5]"});
  Tensor big = Tensor::zeros(Shape{4, 7});
  expect_error([&] { add_forward(big, x, x); }, {"add_forward", "[4, 7]"});
  Tensor q = Tensor::zeros(Shape{1, 4, 6, 8}), k = Tensor::zeros(Shape{1, 4, 4, 8});
  Tensor o = Tensor::empty(Shape{1, 4, 6, 8}), lse = Tensor::empty(Shape{1, 6, 4});
  expect_error([&] { attention_forward(o, lse, q, k, k); }, {"NH=6", "NKV=4"});
}

TEST(KernelErrors, DtypeMismatchNamesDtypes) {
  Tensor x = Tensor::zeros(Shape{4, 5}), w = Tensor::zeros(Shape{3, 5}, DType::bf16);
  Tensor out = Tensor::empty(Shape{4, 3});
  expect_error([&] { linear_forward(out, x, w, nullptr); }, {"weight", "bf16", "f32"});
  Tensor i = Tensor::zeros(Shape{4}, DType::i32), o = Tensor::empty(Shape{4}, DType::i32);
  expect_error([&] { gelu_forward(o, i); }, {"gelu_forward", "i32"});
}

TEST(KernelErrors, UnsupportedDeviceNamesBackendAndOp) {
  Device cuda{DeviceType::cuda, 0};
  expect_error([&] { unsupported_device(cuda, "attention_forward"); },
               {"cuda does not support attention_forward"});
  EXPECT_TRUE(device_supported(DeviceType::cpu));
}

TEST(KernelErrors, GemmBackendIsNamedAndMeasured) {
  std::string name = gemm_backend_name();
  EXPECT_TRUE(name == "onednn" || name == "openblas") << name;
  EXPECT_GT(measure_gemm_peak_gflops(64), 0.0);
}

// As a GPU's kernels do, the simulated device refuses an op whose tensors are on it and on the
// host, or on two of its indices, naming the op and both devices.
using SimulatedKernelErrors = braid::testing::SimulatedDeviceTest;

TEST_F(SimulatedKernelErrors, TensorsOnTwoDevicesAreRefused) {
  Tensor on_device = Tensor::full(Shape{8}, 1.0).to(dev);
  Tensor host = Tensor::full(Shape{8}, 2.0);
  expect_error([&] { axpy(on_device, host, 1.0f); }, {"axpy", "cpu", "cuda:0", "one device"});
  Tensor other = Tensor::full(Shape{8}, 2.0).to(Device{DeviceType::cuda, 1});
  expect_error([&] { axpy(on_device, other, 1.0f); }, {"axpy", "cuda:1", "cuda:0"});
  axpy(on_device, Tensor::full(Shape{8}, 2.0).to(dev), 1.0f);  // one device: runs
  EXPECT_EQ(on_device.to(Device::cpu()).to_f32_vector(), std::vector<float>(8, 3.0f));
}

}  // namespace
}  // namespace braid::kernels
