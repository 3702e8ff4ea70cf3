// The element-wise CUDA kernels (cuda/elementwise.cu, cuda/optimizer.cu) against the reference
// twins or the CPU kernels, on aligned tensors and on views one element into a buffer (no
// 128-bit path), with sizes that are not multiples of 8. Skipped without a GPU.
#include <cmath>
#include <limits>
#include <vector>

#include "braid/kernels/cuda_test/cuda_test_util.h"
#include "braid/kernels/ops.h"
#include "braid/kernels/reference/reference.h"

namespace braid::kernels::test {
namespace {

namespace ref = braid::kernels::reference;

// A GPU copy of t: packed (aligned), or a view at element offset 1 of a larger GPU buffer.
Tensor gpu_copy(const Tensor& t, bool unaligned) {
  if (!unaligned) return on_gpu(t);
  Tensor big = on_gpu(Tensor::zeros(Shape{t.numel() + 1}, t.dtype()));
  Tensor v = big.flat_range(1, t.numel()).view(t.shape());
  v.copy_(t);
  return v;
}

// The GPU result back on the CPU, in the shape of `like`.
Tensor back(const Tensor& g, const Tensor& like) {
  return on_cpu(g).view(like.shape());
}

class CudaElementwise : public CudaKernelTest {};

TEST_P(CudaElementwise, CastIsBitIdentical) {
  for (bool unaligned : {false, true}) {
    for (int64_t n : {int64_t{1037}, int64_t{4096}}) {
      for (DType od : {DType::f32, DType::bf16, DType::f16}) {
        SCOPED_TRACE(::testing::Message()
                     << "n=" << n << " out " << dtype_name(od) << " unaligned=" << unaligned);
        Tensor in = rnd(Shape{n}, 3.0f);
        Tensor out_r = Tensor::empty(Shape{n}, od);
        ref::cast(out_r, in);
        Tensor out = gpu_copy(Tensor::zeros(Shape{n}, od), unaligned);
        Tensor gin = gpu_copy(in, unaligned);
        cast(out, gin);
        EXPECT_TRUE(braid::testing::bit_equal(back(out, out_r), out_r));
      }
    }
  }
}

TEST_P(CudaElementwise, AddAxpyScale) {
  for (bool unaligned : {false, true}) {
    for (int64_t n : {int64_t{1037}, int64_t{4096}}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " unaligned=" << unaligned);
      Tensor a = rnd(Shape{n}), b = rnd(Shape{n});
      Tensor out_r = Tensor::empty(Shape{n}, dt());
      ref::add_forward(out_r, a, b);
      Tensor out = gpu_copy(Tensor::zeros(Shape{n}, dt()), unaligned);
      add_forward(out, gpu_copy(a, unaligned), gpu_copy(b, unaligned));
      EXPECT_TRUE(close(back(out, out_r), out_r, tol()));
      for (DType xd : {DType::f32, DType::bf16, DType::f16}) {  // x in any float dtype
        Tensor x = Tensor::randn(Shape{n}, rng_, 1.0f, xd), y = rnd(Shape{n});
        Tensor y_r = y.clone();
        ref::axpy(y_r, x, 0.37f);
        Tensor gy = gpu_copy(y, unaligned);
        axpy(gy, gpu_copy(x, unaligned), 0.37f);
        EXPECT_TRUE(close(back(gy, y_r), y_r, tol())) << "x " << dtype_name(xd);
      }
      Tensor s_r = a.clone();
      ref::scale(s_r, -1.75f);
      Tensor gs = gpu_copy(a, unaligned);
      scale(gs, -1.75f);
      EXPECT_TRUE(close(back(gs, s_r), s_r, tol()));
    }
  }
}

TEST_P(CudaElementwise, SumsOfSquaresAndMaxAbs) {
  for (bool unaligned : {false, true}) {
    for (int64_t n : {int64_t{1}, int64_t{1037}, int64_t{100003}}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " unaligned=" << unaligned);
      Tensor x = rnd(Shape{n}, 0.01f);
      Tensor gx = gpu_copy(x, unaligned);
      const double ss_r = ref::sum_squares(x);
      EXPECT_NEAR(sum_squares(gx), ss_r, 1e-12 * ss_r + 1e-30);
      const float m = max_abs(gx);
      EXPECT_EQ(m, ref::max_abs(x));
      int e = 0;
      std::frexp(m, &e);
      const int shift = 55 - 2 * e;  // every term < 2^55 (Note [Exact norm])
      // bit-identical to the CPU kernel and to the naive twin
      EXPECT_TRUE(sum_squares_fixed(gx, shift) == sum_squares_fixed(x, shift));
      EXPECT_TRUE(sum_squares_fixed(gx, shift) == ref::sum_squares_fixed(x, shift));
    }
  }
  EXPECT_EQ(max_abs(on_gpu(Tensor::zeros(Shape{0}, dt()))), 0.0f);
  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    Tensor x = Tensor::zeros(Shape{1000}, DType::f32);
    x.data<float>()[517] = bad;
    EXPECT_EQ(max_abs(on_gpu(x.to(dt()))), std::numeric_limits<float>::infinity());
  }
}

// Note [Multi-tensor launches]: the list ops over 150 tensors (two launches of segments) of
// every float dtype and many sizes (empty ones and an undefined one among them), aligned and
// not, give the CPU's results bit for bit.
TEST_P(CudaElementwise, ListOpsAreTheCpusOverEveryTensor) {
  std::vector<Tensor> cpu, gpu;
  for (int i = 0; i < 150; ++i) {
    const int64_t n = i % 7 == 0 ? 0 : i % 5 == 0 ? 100003 : 1 + (i * 37) % 2000;
    const DType d = i % 3 == 0 ? DType::f32 : i % 3 == 1 ? DType::bf16 : DType::f16;
    cpu.push_back(Tensor::randn(Shape{n}, rng_, 0.01f * static_cast<float>(1 + i % 4), d));
    gpu.push_back(gpu_copy(cpu.back(), i % 2 == 1));
  }
  cpu.emplace_back();
  gpu.emplace_back();
  const float m = max_abs(cpu);
  EXPECT_EQ(max_abs(gpu), m);
  int e = 0;
  std::frexp(m, &e);
  const int shift = 55 - 2 * e;  // every term < 2^55 (Note [Exact norm])
  EXPECT_TRUE(sum_squares_fixed(gpu, shift) == sum_squares_fixed(cpu, shift));
  scale(cpu, -0.37f);
  scale(gpu, -0.37f);
  for (size_t i = 0; i + 1 < cpu.size(); ++i)
    EXPECT_TRUE(braid::testing::bit_equal(on_cpu(gpu[i]), cpu[i])) << "tensor " << i;
  EXPECT_EQ(max_abs(std::vector<Tensor>{}), 0.0f);
  EXPECT_TRUE(sum_squares_fixed(std::vector<Tensor>{Tensor{}}, 10) == 0);
  gpu[77] = on_gpu(Tensor::full(Shape{3}, std::nanf(""), DType::f32));
  EXPECT_EQ(max_abs(gpu), std::numeric_limits<float>::infinity());
}

TEST_P(CudaElementwise, Columns) {
  const int64_t N = 13, CT = 40;
  for (bool unaligned : {false, true}) {
    // (start, W): 8-aligned columns (the 128-bit path when aligned), then odd ones
    for (auto [start, W] : {std::pair<int64_t, int64_t>{8, 16}, {3, 13}}) {
      SCOPED_TRACE(::testing::Message()
                   << "start=" << start << " W=" << W << " unaligned=" << unaligned);
      Tensor inp = rnd(Shape{N, CT});
      Tensor out_r = Tensor::empty(Shape{N, W}, dt());
      ref::copy_columns(out_r, inp, start);
      Tensor out = gpu_copy(Tensor::zeros(Shape{N, W}, dt()), unaligned);
      copy_columns(out, gpu_copy(inp, unaligned), start);
      EXPECT_TRUE(braid::testing::bit_equal(back(out, out_r), out_r));
      Tensor dout = rnd(Shape{N, W}), dinp_r = inp.clone();  // accumulate into nonzero
      ref::add_columns(dinp_r, dout, start);
      Tensor dinp = gpu_copy(inp, unaligned);
      add_columns(dinp, gpu_copy(dout, unaligned), start);
      EXPECT_TRUE(close(back(dinp, dinp_r), dinp_r, tol()));
      Tensor wide_r = inp.clone();  // the other columns kept
      ref::set_columns(wide_r, dout, start);
      Tensor wide = gpu_copy(inp, unaligned);
      set_columns(wide, gpu_copy(dout, unaligned), start);
      EXPECT_TRUE(braid::testing::bit_equal(back(wide, wide_r), wide_r));
    }
  }
}

TEST_P(CudaElementwise, BiasAdd) {
  for (bool unaligned : {false, true}) {
    for (int64_t C : {int64_t{24}, int64_t{13}}) {
      SCOPED_TRACE(::testing::Message() << "C=" << C << " unaligned=" << unaligned);
      const int64_t N = 37;
      Tensor x = rnd(Shape{N, C}), bias = rnd(Shape{C});
      Tensor out_r = Tensor::empty(Shape{N, C}, dt());
      bias_add_forward(out_r, x, bias);  // the CPU kernel
      Tensor out = gpu_copy(Tensor::zeros(Shape{N, C}, dt()), unaligned);
      bias_add_forward(out, gpu_copy(x, unaligned), gpu_copy(bias, unaligned));
      EXPECT_TRUE(close(back(out, out_r), out_r, tol()));
      for (DType gd : {dt(), DType::f32}) {  // dbias in the input dtype or f32
        Tensor db = Tensor::randn(Shape{C}, rng_, 1.0f, gd), db_r = db.clone();
        bias_add_backward(db_r, x);
        Tensor gdb = gpu_copy(db, unaligned);
        bias_add_backward(gdb, gpu_copy(x, unaligned));
        EXPECT_TRUE(close(back(gdb, db_r), db_r, tol_for(gd))) << "dbias " << dtype_name(gd);
      }
    }
  }
}

TEST_P(CudaElementwise, AdamWMatchesTheCpuKernelOverSteps) {
  for (bool unaligned : {false, true}) {
    for (int64_t n : {int64_t{1037}, int64_t{4096}}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " unaligned=" << unaligned);
      Tensor p = rnd_f32(Shape{n}), m = rnd_f32(Shape{n}, 0.1f);
      Tensor v = Tensor::uniform(Shape{n}, rng_, 0.0f, 0.1f);
      Tensor gp = gpu_copy(p, unaligned), gm = gpu_copy(m, unaligned), gv = gpu_copy(v, unaligned);
      for (int64_t t = 1; t <= 5; ++t) {
        Tensor g = rnd(Shape{n});
        adamw_step(p, g, m, v, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
        adamw_step(gp, gpu_copy(g, unaligned), gm, gv, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
      }
      EXPECT_TRUE(braid::testing::all_close(back(gp, p), p, 2e-6, 1e-7));
      EXPECT_TRUE(braid::testing::all_close(back(gm, m), m, 2e-6, 1e-7));
      EXPECT_TRUE(braid::testing::all_close(back(gv, v), v, 2e-6, 1e-9));
    }
  }
}

// The list step (one launch per 40 slices, Note [Multi-tensor launches]) is the single steps bit
// for bit: 100 slices of many sizes (empty ones among them), aligned and not, gradients of every
// float dtype, each slice with its own lr and weight decay, some with a bf16 or f16 compute copy
// (the single step's fused variant on a device: the step, then the cast).
TEST_P(CudaElementwise, AdamWListIsTheSingleStepsBitForBit) {
  struct Slice {
    Tensor p, m, v, c;      // the list's
    Tensor p1, m1, v1, c1;  // the single steps'
    float lr, wd;
  };
  std::vector<Slice> slices;
  for (int i = 0; i < 100; ++i) {
    const int64_t n = i % 9 == 0 ? 0 : i % 4 == 0 ? 65536 : 1 + (i * 53) % 3000;
    const bool unaligned = i % 3 == 1;
    Slice s;
    s.p = gpu_copy(rnd_f32(Shape{n}), unaligned);
    s.m = gpu_copy(rnd_f32(Shape{n}, 0.1f), unaligned);
    s.v = gpu_copy(Tensor::uniform(Shape{n}, rng_, 0.0f, 0.1f), unaligned);
    if (i % 5 == 2 || i % 5 == 3)
      s.c = gpu_copy(Tensor::zeros(Shape{n}, i % 5 == 2 ? DType::bf16 : DType::f16), unaligned);
    s.p1 = s.p.clone(), s.m1 = s.m.clone(), s.v1 = s.v.clone();
    if (s.c.defined()) s.c1 = s.c.clone();
    s.lr = 1e-3f * static_cast<float>(1 + i % 3);
    s.wd = i % 2 == 0 ? 0.1f : 0.0f;
    slices.push_back(std::move(s));
  }
  for (int64_t t = 1; t <= 3; ++t) {
    std::vector<Tensor> grads;
    grads.reserve(slices.size());  // the list points into it
    std::vector<AdamWSlice> list;
    for (size_t i = 0; i < slices.size(); ++i) {
      Slice& s = slices[i];
      const DType gd = i % 3 == 0 ? DType::f32 : i % 3 == 1 ? dt() : DType::bf16;
      grads.push_back(gpu_copy(Tensor::randn(s.p.shape(), rng_, 1.0f, gd), i % 2 == 1));
      list.push_back({&s.p, &grads.back(), &s.m, &s.v, s.c.defined() ? &s.c : nullptr, s.lr, s.wd});
    }
    adamw_step(list, 0.9f, 0.95f, 1e-8f, t);
    for (size_t i = 0; i < slices.size(); ++i) {
      Slice& s = slices[i];
      if (s.c1.defined()) {
        adamw_step(s.p1, grads[i], s.m1, s.v1, s.lr, 0.9f, 0.95f, 1e-8f, s.wd, t, s.c1);
      } else {
        adamw_step(s.p1, grads[i], s.m1, s.v1, s.lr, 0.9f, 0.95f, 1e-8f, s.wd, t);
      }
    }
  }
  for (size_t i = 0; i < slices.size(); ++i) {
    const Slice& s = slices[i];
    SCOPED_TRACE(::testing::Message() << "slice " << i << " n=" << s.p.numel());
    EXPECT_TRUE(braid::testing::bit_equal(on_cpu(s.p), on_cpu(s.p1)));
    EXPECT_TRUE(braid::testing::bit_equal(on_cpu(s.m), on_cpu(s.m1)));
    EXPECT_TRUE(braid::testing::bit_equal(on_cpu(s.v), on_cpu(s.v1)));
    if (s.c.defined()) {
      EXPECT_TRUE(braid::testing::bit_equal(on_cpu(s.c), on_cpu(s.c1)));
    }
  }
}

TEST_P(CudaElementwise, SgdMatchesTheCpuKernel) {
  const int64_t n = 1037;
  for (bool nesterov : {false, true}) {
    Tensor p = rnd_f32(Shape{n}), buf = Tensor::zeros(Shape{n});
    Tensor gp = on_gpu(p), gbuf = on_gpu(buf);
    for (int step = 0; step < 3; ++step) {
      Tensor g = rnd(Shape{n});
      sgd_step(p, g, buf, 0.01f, 0.9f, 0.01f, nesterov, step == 0);
      sgd_step(gp, on_gpu(g), gbuf, 0.01f, 0.9f, 0.01f, nesterov, step == 0);
    }
    EXPECT_TRUE(braid::testing::all_close(on_cpu(gp), p, 2e-6, 1e-7)) << nesterov;
    EXPECT_TRUE(braid::testing::all_close(on_cpu(gbuf), buf, 2e-6, 1e-7)) << nesterov;
  }
  // momentum 0: no buffer
  Tensor p = rnd_f32(Shape{n}), g = rnd(Shape{n}), none;
  Tensor gp = on_gpu(p), gnone;
  sgd_step(p, g, none, 0.01f, 0.0f, 0.01f, false, true);
  sgd_step(gp, on_gpu(g), gnone, 0.01f, 0.0f, 0.01f, false, true);
  EXPECT_TRUE(braid::testing::all_close(on_cpu(gp), p, 2e-6, 1e-7));
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaElementwise, float_dtypes(), dtype_param_name);

}  // namespace
}  // namespace braid::kernels::test
