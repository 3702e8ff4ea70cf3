// matmul and the linear layer on the GPU (cuBLASLt) against the reference twins, and the
// device memory plumbing they stand on: copies both ways, zeroing, dtype conversion on the
// device, the caching allocator's reuse and its charge to the MemoryTracker.
#include <gtest/gtest.h>

#include "braid/kernels/cuda/allocator.h"
#include "braid/kernels/cuda_test/cuda_test_util.h"
#include "braid/kernels/ops.h"
#include "braid/kernels/reference/reference.h"

namespace braid::kernels::test {
namespace {

class CudaLinear : public CudaKernelTest {};

TEST_P(CudaLinear, MatmulEveryTransposeWithBeta) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const int64_t M = 37, N = 70, K = 129;
      Tensor a = rnd(ta ? Shape{K, M} : Shape{M, K}), b = rnd(tb ? Shape{N, K} : Shape{K, N});
      Tensor c = rnd(Shape{M, N});
      Tensor want = c.clone();
      reference::matmul(want, a, b, ta, tb, 0.5f, 1.0f);
      Tensor got = on_gpu(c);
      matmul(got, on_gpu(a), on_gpu(b), ta, tb, 0.5f, 1.0f);
      EXPECT_TRUE(close(on_cpu(got), want, tol())) << "trans_a " << ta << " trans_b " << tb;
    }
  }
}

TEST_P(CudaLinear, ForwardWithAndWithoutBias) {
  const int64_t N = 96, C = 768, OC = 2304;
  Tensor x = rnd(Shape{2, N / 2, C}), w = rnd(Shape{OC, C}, 0.02f), b = rnd(Shape{OC});
  for (bool with_bias : {false, true}) {
    Tensor want = Tensor::empty(Shape{2, N / 2, OC}, dt());
    reference::linear_forward(want, x, w, with_bias ? &b : nullptr);
    Tensor got = Tensor::empty(Shape{2, N / 2, OC}, dt(), MemCategory::activations, nullptr, gpu());
    Tensor gb = on_gpu(b);
    linear_forward(got, on_gpu(x), on_gpu(w), with_bias ? &gb : nullptr);
    EXPECT_TRUE(close(on_cpu(got), want, tol())) << "bias " << with_bias;
  }
}

TEST_P(CudaLinear, BackwardAccumulatesIncludingF32ParameterGradients) {
  const int64_t N = 50, C = 64, OC = 48;
  Tensor x = rnd(Shape{N, C}), w = rnd(Shape{OC, C}), dout = rnd(Shape{N, OC});
  for (int mode : {1, 2})
    for (DType gdt : {dt(), DType::f32}) {
      Fusion fused(mode);
      Tensor dinp = rnd(Shape{N, C}), dw = Tensor::randn(Shape{OC, C}, rng_, 1.0f, gdt);
      Tensor db = Tensor::randn(Shape{OC}, rng_, 1.0f, gdt);
      Tensor want_dinp = dinp.clone(), want_dw = dw.clone(), want_db = db.clone();
      reference::linear_backward(&want_dinp, &want_dw, &want_db, dout, x, w);
      Tensor g_dinp = on_gpu(dinp), g_dw = on_gpu(dw), g_db = on_gpu(db);
      linear_backward(&g_dinp, &g_dw, &g_db, on_gpu(dout), on_gpu(x), on_gpu(w));
      EXPECT_TRUE(close(on_cpu(g_dinp), want_dinp, tol()));
      EXPECT_TRUE(close(on_cpu(g_dw), want_dw, tol())) << "dweight " << dtype_name(gdt);
      EXPECT_TRUE(close(on_cpu(g_db), want_db, tol()))
          << "dbias " << dtype_name(gdt) << " " << mode;
    }
  // Only some gradients wanted.
  Tensor dinp = Tensor::zeros(Shape{N, C}, dt()), want = dinp.clone();
  reference::linear_backward(&want, nullptr, nullptr, dout, x, w);
  Tensor g = on_gpu(dinp);
  linear_backward(&g, nullptr, nullptr, on_gpu(dout), on_gpu(x), on_gpu(w));
  EXPECT_TRUE(close(on_cpu(g), want, tol()));
}

TEST_P(CudaLinear, BiasGradientInTheWeightGemmMatchesItsOwnPass) {
  // GPT-2's shapes (qkv, and the MLP's projection back), rows of a micro-batch: the fused
  // BGRADB epilogue and the separate column sums both match the reference (f64 sums), and the
  // bias gradient alone (no dweight) still takes its own pass.
  for (auto [C, OC] : {std::pair<int64_t, int64_t>{768, 2304}, {3072, 768}}) {
    const int64_t N = 1024;
    Tensor x = rnd(Shape{N, C}), dout = rnd(Shape{N, OC}), w = rnd(Shape{OC, C}, 0.02f);
    Tensor dw = Tensor::randn(Shape{OC, C}, rng_, 1.0f, DType::f32);
    Tensor db = Tensor::randn(Shape{OC}, rng_, 1.0f, DType::f32);
    Tensor want_dw = dw.clone(), want_db = db.clone(), want_db_only = db.clone();
    reference::linear_backward(nullptr, &want_dw, &want_db, dout, x, w);
    reference::linear_backward(nullptr, nullptr, &want_db_only, dout, x, w);
    for (int mode : {1, 2}) {
      Fusion fused(mode);
      Tensor g_dw = on_gpu(dw), g_db = on_gpu(db), g_db_only = on_gpu(db);
      linear_backward(nullptr, &g_dw, &g_db, on_gpu(dout), on_gpu(x), on_gpu(w));
      linear_backward(nullptr, nullptr, &g_db_only, on_gpu(dout), on_gpu(x), on_gpu(w));
      EXPECT_TRUE(close(on_cpu(g_dw), want_dw, tol())) << C << "->" << OC << " mode " << mode;
      EXPECT_TRUE(close(on_cpu(g_db), want_db, tol())) << C << "->" << OC << " mode " << mode;
      EXPECT_TRUE(close(on_cpu(g_db_only), want_db_only, tol())) << C << "->" << OC;
    }
  }
}

TEST_P(CudaLinear, UnalignedViewsOfAFlatBuffer) {
  // Parameters are views at any offset of one flat buffer: cuBLASLt is told their alignment.
  const int64_t C = 33, OC = 17, N = 9;
  Tensor flat = rnd(Shape{1 + OC * C});
  Tensor w = flat.flat_range(1, OC * C).view(Shape{OC, C});
  Tensor x = rnd(Shape{N, C});
  Tensor want = Tensor::empty(Shape{N, OC}, dt());
  reference::linear_forward(want, x, w, nullptr);
  Tensor gflat = on_gpu(flat);
  Tensor gw = gflat.flat_range(1, OC * C).view(Shape{OC, C});
  Tensor got = Tensor::empty(Shape{N, OC}, dt(), MemCategory::activations, nullptr, gpu());
  linear_forward(got, on_gpu(x), gw, nullptr);
  EXPECT_TRUE(close(on_cpu(got), want, tol()));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaLinear, float_dtypes(), dtype_param_name);

TEST(CudaMemory, CopiesZeroConvertAndTrack) {
  BRAID_REQUIRE_GPU();
  auto tracker = std::make_shared<MemoryTracker>("cuda:0");
  Rng rng(3);
  Tensor host = Tensor::randn(Shape{1000}, rng);
  {
    MemoryScope scope(tracker, MemCategory::activations);
    Tensor dev = host.to(gpu());  // keeps the source's category (other)
    EXPECT_EQ(tracker->current(MemCategory::other), 4000);
    Tensor act = Tensor::empty(Shape{250}, DType::f32, MemCategory::activations, tracker, gpu());
    EXPECT_EQ(tracker->current(MemCategory::activations), 1000);
    EXPECT_EQ(on_cpu(dev).to_f32_vector(), host.to_f32_vector());  // bit-exact round trip
    Tensor bf = dev.to(DType::bf16);                               // converted on the device
    EXPECT_EQ(bf.device(), gpu());
    EXPECT_EQ(on_cpu(bf).to_f32_vector(), host.to(DType::bf16).to_f32_vector());
    dev.zero_();
    for (float v : dev.to_f32_vector()) ASSERT_EQ(v, 0.0f);
    dev.fill_(2.5);
    EXPECT_EQ(dev.flat_range(999, 1).item(), 2.5f);
    // Host access to device memory is refused, naming the device.
    try {
      (void)dev.data<float>();
      ADD_FAILURE() << "host access to a device tensor did not throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(tracker->current(MemCategory::activations), 0);
  EXPECT_EQ(tracker->current(MemCategory::other), 0);
  // Freed blocks are cached and reused without another cudaMalloc.
  const int64_t before = cuda::allocator_stats(0).device_allocs;
  for (int i = 0; i < 10; ++i)
    Tensor t = Tensor::empty(Shape{1 << 20}, DType::f32, MemCategory::other, nullptr, gpu());
  EXPECT_LE(cuda::allocator_stats(0).device_allocs - before, 1);
}

}  // namespace
}  // namespace braid::kernels::test
