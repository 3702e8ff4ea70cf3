// The CUDA norm, activation, embedding and rope kernels against their reference twins: inputs
// built on the CPU, the twin run there, the op run on GPU copies through kernels/ops.h, and the
// results compared with the dtype tolerances. Covers accumulation into nonzero gradients, null
// gradients, f32 parameter gradients for bf16/f16 inputs, aligned (128-bit) and unaligned or
// odd-C (scalar) paths, repeated ids, explicit positions and out-of-range ids.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "braid/kernels/cuda_test/cuda_test_util.h"
#include "braid/kernels/ops.h"
#include "braid/kernels/reference/reference.h"

namespace braid::kernels::test {
namespace {

namespace ref = braid::kernels::reference;

class CudaNnOps : public CudaKernelTest {
 protected:
  // A GPU copy of t that starts one element into its storage: not 16-byte aligned, so the
  // kernels take their scalar paths.
  static Tensor unaligned_gpu(const Tensor& t) {
    Tensor big = Tensor::zeros(Shape{t.numel() + 1}, t.dtype());
    std::memcpy(static_cast<char*>(big.raw_data()) + dtype_size(t.dtype()), t.raw_data(),
                t.nbytes());
    return on_gpu(big).flat_range(1, t.numel()).view(t.shape());
  }
  Tensor gpu_copy(const Tensor& t, bool aligned) { return aligned ? on_gpu(t) : unaligned_gpu(t); }
};

::testing::AssertionResult gpu_close(const Tensor& gpu_result, const Tensor& expected, double tol) {
  return close(on_cpu(gpu_result), expected, tol);
}

TEST_P(CudaNnOps, LayerNorm) {
  for (int64_t C : {int64_t{768}, int64_t{37}}) {
    for (bool aligned : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "C=" << C << " aligned=" << aligned);
      const int64_t N = 70;
      Tensor x = rnd(Shape{N, C}, 2.0f), w = rnd(Shape{C}), b = rnd(Shape{C});
      Tensor out_r = Tensor::empty(Shape{N, C}, dt());
      Tensor mean_r = Tensor::empty(Shape{N}), rstd_r = Tensor::empty(Shape{N});
      ref::layernorm_forward(out_r, mean_r, rstd_r, x, w, b, 1e-5f);
      Tensor out = gpu_copy(out_r, aligned), mean = on_gpu(mean_r), rstd = on_gpu(rstd_r);
      Tensor xg = gpu_copy(x, aligned), wg = on_gpu(w), bg = on_gpu(b);
      layernorm_forward(out, mean, rstd, xg, wg, bg, 1e-5f);
      EXPECT_TRUE(gpu_close(out, out_r, tol()));
      EXPECT_TRUE(gpu_close(mean, mean_r, 2e-5));
      EXPECT_TRUE(gpu_close(rstd, rstd_r, 2e-5));

      Tensor dout = rnd(Shape{N, C}), dx = rnd(Shape{N, C}), dw = rnd(Shape{C}), db = rnd(Shape{C});
      Tensor dx_r = dx.clone(), dw_r = dw.clone(), db_r = db.clone();
      ref::layernorm_backward(&dx_r, &dw_r, &db_r, dout, x, w, mean_r, rstd_r);
      Tensor dxg = gpu_copy(dx, aligned), dwg = on_gpu(dw), dbg = on_gpu(db);
      Tensor doutg = gpu_copy(dout, aligned);
      Tensor mg = on_gpu(mean_r), rg = on_gpu(rstd_r);
      layernorm_backward(&dxg, &dwg, &dbg, doutg, xg, wg, mg, rg);
      EXPECT_TRUE(gpu_close(dxg, dx_r, tol()));
      EXPECT_TRUE(gpu_close(dwg, dw_r, tol()));
      EXPECT_TRUE(gpu_close(dbg, db_r, tol()));

      // Null dinp and dbias; an f32 dweight for any input dtype.
      Tensor dw32 = rnd_f32(Shape{C}), dw32_r = dw32.clone();
      ref::layernorm_backward(nullptr, &dw32_r, nullptr, dout, x, w, mean_r, rstd_r);
      Tensor dw32g = on_gpu(dw32);
      layernorm_backward(nullptr, &dw32g, nullptr, doutg, xg, wg, mg, rg);
      EXPECT_TRUE(gpu_close(dw32g, dw32_r, tol()));
    }
  }
}

TEST_P(CudaNnOps, LayerNormManyRows) {
  // More rows than the parameter reduction's 1024 chunks of 32.
  const int64_t N = 40000, C = 64;
  Tensor x = rnd(Shape{N, C}), w = rnd(Shape{C}), b = rnd(Shape{C});
  Tensor out_r = Tensor::empty(Shape{N, C}, dt());
  Tensor mean_r = Tensor::empty(Shape{N}), rstd_r = Tensor::empty(Shape{N});
  ref::layernorm_forward(out_r, mean_r, rstd_r, x, w, b, 1e-5f);
  Tensor dout = rnd(Shape{N, C}), dw = Tensor::zeros(Shape{C}), db = Tensor::zeros(Shape{C});
  Tensor dw_r = dw.clone(), db_r = db.clone();
  ref::layernorm_backward(nullptr, &dw_r, &db_r, dout, x, w, mean_r, rstd_r);
  Tensor dwg = on_gpu(dw), dbg = on_gpu(db);
  Tensor xg = on_gpu(x), wg = on_gpu(w), doutg = on_gpu(dout);
  Tensor mg = on_gpu(mean_r), rg = on_gpu(rstd_r);
  layernorm_backward(nullptr, &dwg, &dbg, doutg, xg, wg, mg, rg);
  EXPECT_TRUE(gpu_close(dwg, dw_r, 1e-4));
  EXPECT_TRUE(gpu_close(dbg, db_r, 1e-4));
}

TEST_P(CudaNnOps, NormBackwardInOnePassMatchesTheTwoKernels) {
  // The fused backward (rows of up to 1024 16-bit or 512 f32 columns) against the reference
  // and against the dinp and parameter kernels it replaces (BRAID_CUDA_FUSION=0): dinp the
  // same to the bit (same arithmetic, same order), the parameter sums within the tolerance.
  for (int64_t C : {int64_t{96}, int64_t{768}, int64_t{1024}, int64_t{1600}}) {
    SCOPED_TRACE(::testing::Message() << "C=" << C);
    const int64_t N = 1000;  // not a multiple of the 32-row blocks
    Tensor x = rnd(Shape{N, C}, 2.0f), w = rnd(Shape{C}), b = rnd(Shape{C});
    Tensor out_r = Tensor::empty(Shape{N, C}, dt());
    Tensor mean_r = Tensor::empty(Shape{N}), rstd_r = Tensor::empty(Shape{N});
    ref::layernorm_forward(out_r, mean_r, rstd_r, x, w, b, 1e-5f);
    Tensor dout = rnd(Shape{N, C}), dx = rnd(Shape{N, C}), dw = rnd_f32(Shape{C});
    Tensor db = rnd(Shape{C});
    Tensor dx_r = dx.clone(), dw_r = dw.clone(), db_r = db.clone(), rdx_r = dx.clone();
    Tensor rdw_r = dw.clone();
    ref::layernorm_backward(&dx_r, &dw_r, &db_r, dout, x, w, mean_r, rstd_r);
    ref::rmsnorm_backward(&rdx_r, &rdw_r, dout, x, w, rstd_r);
    std::vector<float> dinp_of_mode[3], rms_dinp_of_mode[3];
    for (int mode : {1, 2}) {
      Fusion fused(mode);
      Tensor xg = on_gpu(x), wg = on_gpu(w), doutg = on_gpu(dout);
      Tensor mg = on_gpu(mean_r), rg = on_gpu(rstd_r);
      Tensor dxg = on_gpu(dx), dwg = on_gpu(dw), dbg = on_gpu(db);
      layernorm_backward(&dxg, &dwg, &dbg, doutg, xg, wg, mg, rg);
      EXPECT_TRUE(gpu_close(dxg, dx_r, tol())) << "mode " << mode;
      EXPECT_TRUE(gpu_close(dwg, dw_r, tol())) << "mode " << mode;
      EXPECT_TRUE(gpu_close(dbg, db_r, tol())) << "mode " << mode;
      dinp_of_mode[mode] = on_cpu(dxg).to_f32_vector();
      Tensor rdxg = on_gpu(dx), rdwg = on_gpu(dw);
      rmsnorm_backward(&rdxg, &rdwg, doutg, xg, wg, rg);
      EXPECT_TRUE(gpu_close(rdxg, rdx_r, tol())) << "mode " << mode;
      EXPECT_TRUE(gpu_close(rdwg, rdw_r, tol())) << "mode " << mode;
      rms_dinp_of_mode[mode] = on_cpu(rdxg).to_f32_vector();
      // Parameter gradients only (no dinp), and dbias alone.
      Tensor dw2 = on_gpu(dw), db2 = on_gpu(db);
      layernorm_backward(nullptr, &dw2, nullptr, doutg, xg, wg, mg, rg);
      layernorm_backward(nullptr, nullptr, &db2, doutg, xg, wg, mg, rg);
      EXPECT_TRUE(gpu_close(dw2, dw_r, tol())) << "mode " << mode;
      EXPECT_TRUE(gpu_close(db2, db_r, tol())) << "mode " << mode;
    }
    EXPECT_EQ(dinp_of_mode[1], dinp_of_mode[2]);
    EXPECT_EQ(rms_dinp_of_mode[1], rms_dinp_of_mode[2]);
  }
}

TEST_P(CudaNnOps, RmsNorm) {
  for (int64_t C : {int64_t{768}, int64_t{37}}) {
    for (bool aligned : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "C=" << C << " aligned=" << aligned);
      const int64_t N = 45;
      Tensor x = rnd(Shape{N, C}, 2.0f), w = rnd(Shape{C});
      Tensor out_r = Tensor::empty(Shape{N, C}, dt()), rstd_r = Tensor::empty(Shape{N});
      ref::rmsnorm_forward(out_r, rstd_r, x, w, 1e-6f);
      Tensor out = gpu_copy(out_r, aligned), rstd = on_gpu(rstd_r);
      Tensor xg = gpu_copy(x, aligned), wg = on_gpu(w);
      rmsnorm_forward(out, rstd, xg, wg, 1e-6f);
      EXPECT_TRUE(gpu_close(out, out_r, tol()));
      EXPECT_TRUE(gpu_close(rstd, rstd_r, 2e-5));

      Tensor dout = rnd(Shape{N, C}), dx = rnd(Shape{N, C}), dw = rnd(Shape{C});
      Tensor dx_r = dx.clone(), dw_r = dw.clone();
      ref::rmsnorm_backward(&dx_r, &dw_r, dout, x, w, rstd_r);
      Tensor dxg = gpu_copy(dx, aligned), dwg = on_gpu(dw), doutg = gpu_copy(dout, aligned);
      Tensor rg = on_gpu(rstd_r);
      rmsnorm_backward(&dxg, &dwg, doutg, xg, wg, rg);
      EXPECT_TRUE(gpu_close(dxg, dx_r, tol()));
      EXPECT_TRUE(gpu_close(dwg, dw_r, tol()));

      Tensor dw32 = rnd_f32(Shape{C}), dw32_r = dw32.clone();
      ref::rmsnorm_backward(nullptr, &dw32_r, dout, x, w, rstd_r);
      Tensor dw32g = on_gpu(dw32);
      rmsnorm_backward(nullptr, &dw32g, doutg, xg, wg, rg);
      EXPECT_TRUE(gpu_close(dw32g, dw32_r, tol()));
      Tensor dx2 = dx.clone(), dx2_r = dx.clone();
      ref::rmsnorm_backward(&dx2_r, nullptr, dout, x, w, rstd_r);
      Tensor dx2g = gpu_copy(dx2, aligned);
      rmsnorm_backward(&dx2g, nullptr, doutg, xg, wg, rg);
      EXPECT_TRUE(gpu_close(dx2g, dx2_r, tol()));
    }
  }
}

TEST_P(CudaNnOps, Gelu) {
  for (int64_t n : {int64_t{4096}, int64_t{1001}}) {
    for (bool aligned : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " aligned=" << aligned);
      Tensor x = rnd(Shape{n}, 2.0f), out_r = Tensor::empty(Shape{n}, dt());
      ref::gelu_forward(out_r, x);
      Tensor xg = gpu_copy(x, aligned), out = gpu_copy(out_r, aligned);
      gelu_forward(out, xg);
      EXPECT_TRUE(gpu_close(out, out_r, tol()));
      Tensor dout = rnd(Shape{n}), dx = rnd(Shape{n}), dx_r = dx.clone();
      ref::gelu_backward(dx_r, dout, x);
      Tensor dxg = gpu_copy(dx, aligned), doutg = gpu_copy(dout, aligned);
      gelu_backward(dxg, doutg, xg);
      EXPECT_TRUE(gpu_close(dxg, dx_r, tol()));
      Tensor set_r = dx.clone(),
             setg = gpu_copy(Tensor::full(Shape{n}, std::nanf(""), dt()), aligned);
      ref::gelu_backward(set_r, dout, x, /*accumulate=*/false);
      gelu_backward(setg, doutg, xg, /*accumulate=*/false);
      EXPECT_TRUE(gpu_close(setg, set_r, tol()));
    }
  }
}

TEST_P(CudaNnOps, SwiGlu) {
  for (int64_t n : {int64_t{4096}, int64_t{999}}) {
    for (bool aligned : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " aligned=" << aligned);
      Shape s{n};
      Tensor g = rnd(s, 2.0f), u = rnd(s), out_r = Tensor::empty(s, dt());
      ref::swiglu_forward(out_r, g, u);
      Tensor gg = gpu_copy(g, aligned), ug = gpu_copy(u, aligned), out = gpu_copy(out_r, aligned);
      swiglu_forward(out, gg, ug);
      EXPECT_TRUE(gpu_close(out, out_r, tol()));
      Tensor dout = rnd(s), dg = rnd(s), du = rnd(s);
      Tensor doutg = gpu_copy(dout, aligned);
      for (int mask = 1; mask < 4; ++mask) {  // dgate only, dup only, both
        const bool want_g = mask & 1, want_u = mask & 2;
        Tensor dg_r = dg.clone(), du_r = du.clone();
        ref::swiglu_backward(want_g ? &dg_r : nullptr, want_u ? &du_r : nullptr, dout, g, u);
        Tensor dgg = gpu_copy(dg, aligned), dug = gpu_copy(du, aligned);
        swiglu_backward(want_g ? &dgg : nullptr, want_u ? &dug : nullptr, doutg, gg, ug);
        EXPECT_TRUE(gpu_close(dgg, dg_r, tol()));
        EXPECT_TRUE(gpu_close(dug, du_r, tol()));
      }
    }
  }
}

TEST_P(CudaNnOps, Embedding) {
  for (int64_t C : {int64_t{768}, int64_t{37}}) {
    SCOPED_TRACE(::testing::Message() << "C=" << C);
    const int64_t B = 3, T = 11, V = 9, maxT = 16;
    Tensor id = ids(Shape{B, T}, V);  // V < B*T: repeated ids accumulate
    Tensor wte = rnd(Shape{V, C}), wpe = rnd(Shape{maxT, C});
    Tensor idg = on_gpu(id), wteg = on_gpu(wte), wpeg = on_gpu(wpe);
    for (bool with_pos : {true, false}) {
      Tensor out_r = Tensor::empty(Shape{B, T, C}, dt());
      ref::embedding_forward(out_r, id, wte, with_pos ? &wpe : nullptr);
      Tensor out = on_gpu(out_r);
      embedding_forward(out, idg, wteg, with_pos ? &wpeg : nullptr);
      EXPECT_TRUE(gpu_close(out, out_r, tol()));
    }
    Tensor dout = rnd(Shape{B, T, C}), doutg = on_gpu(dout);
    Tensor dwte = rnd(Shape{V, C}), dwpe = rnd(Shape{maxT, C});
    Tensor dwte_r = dwte.clone(), dwpe_r = dwpe.clone();
    ref::embedding_backward(&dwte_r, &dwpe_r, dout, id);
    Tensor dwteg = on_gpu(dwte), dwpeg = on_gpu(dwpe);
    embedding_backward(&dwteg, &dwpeg, doutg, idg);
    EXPECT_TRUE(gpu_close(dwteg, dwte_r, tol()));
    EXPECT_TRUE(gpu_close(dwpeg, dwpe_r, tol()));

    // f32 gradients for any dout dtype; each alone.
    Tensor dwte32 = rnd_f32(Shape{V, C}), dwpe32 = rnd_f32(Shape{maxT, C});
    Tensor dwte32_r = dwte32.clone(), dwpe32_r = dwpe32.clone();
    ref::embedding_backward(&dwte32_r, nullptr, dout, id);
    ref::embedding_backward(nullptr, &dwpe32_r, dout, id);
    Tensor dwte32g = on_gpu(dwte32), dwpe32g = on_gpu(dwpe32);
    embedding_backward(&dwte32g, nullptr, doutg, idg);
    embedding_backward(nullptr, &dwpe32g, doutg, idg);
    EXPECT_TRUE(gpu_close(dwte32g, dwte32_r, tol()));
    EXPECT_TRUE(gpu_close(dwpe32g, dwpe32_r, tol()));
  }
}

TEST_P(CudaNnOps, EmbeddingSlice) {
  // Rows [5, 12) of a vocabulary of 20: ids below, inside and beyond the slice.
  const int64_t B = 3, T = 11, C = 40, V = 20, v0 = 5, Vl = 7;
  Tensor id = ids(Shape{B, T}, V), wte = rnd(Shape{Vl, C});
  Tensor out_r = Tensor::empty(Shape{B, T, C}, dt());
  ref::embedding_slice_forward(out_r, id, wte, v0);
  Tensor idg = on_gpu(id), out = on_gpu(out_r);
  embedding_slice_forward(out, idg, on_gpu(wte), v0);
  EXPECT_TRUE(gpu_close(out, out_r, 0.0));
  Tensor dout = rnd(Shape{B, T, C}), dwte = rnd(Shape{Vl, C}), dwte_r = dwte.clone();
  ref::embedding_slice_backward(dwte_r, dout, id, v0);
  Tensor dwteg = on_gpu(dwte);
  embedding_slice_backward(dwteg, on_gpu(dout), idg, v0);
  EXPECT_TRUE(gpu_close(dwteg, dwte_r, tol()));
}

TEST_P(CudaNnOps, EmbeddingBadIdThrows) {
  const int64_t B = 2, T = 5, C = 8, V = 9;
  Tensor id = ids(Shape{B, T}, V);
  id.data<int32_t>()[7] = static_cast<int32_t>(V);  // one past the end
  Tensor wteg = on_gpu(rnd(Shape{V, C})), idg = on_gpu(id);
  Tensor out = on_gpu(Tensor::zeros(Shape{B, T, C}, dt()));
  try {
    embedding_forward(out, idg, wteg, nullptr);
    ADD_FAILURE() << "embedding_forward accepted an out-of-range id";
  } catch (const braid::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("token id 9 at position 7"), std::string::npos) << what;
  }
  Tensor dwteg = on_gpu(Tensor::zeros(Shape{V, C}, dt())), doutg = on_gpu(rnd(Shape{B, T, C}));
  EXPECT_THROW(embedding_backward(&dwteg, nullptr, doutg, idg), braid::Error);
  id.data<int32_t>()[7] = -1;
  Tensor neg = on_gpu(id);
  EXPECT_THROW(embedding_slice_forward(out, neg, wteg, 0), braid::Error);
  EXPECT_THROW(embedding_slice_backward(dwteg, doutg, neg, 0), braid::Error);
}

TEST_P(CudaNnOps, Rope) {
  for (int64_t HS : {int64_t{64}, int64_t{16}}) {
    Shape s{2, 7, 3, HS};
    for (int64_t pos0 : {int64_t{0}, int64_t{5}, int64_t{3000}}) {
      SCOPED_TRACE(::testing::Message() << "HS=" << HS << " pos0=" << pos0);
      Tensor x = rnd(s), out_r = Tensor::empty(s, dt());
      ref::rope_forward(out_r, x, 10000.0f, pos0);
      Tensor xg = on_gpu(x), out = on_gpu(out_r);
      rope_forward(out, xg, 10000.0f, pos0);
      EXPECT_TRUE(gpu_close(out, out_r, tol()));
      Tensor inplace = on_gpu(x);
      rope_forward(inplace, inplace, 10000.0f, pos0);  // out may alias x
      EXPECT_TRUE(gpu_close(inplace, out_r, tol()));
      Tensor dout = rnd(s), dx = rnd(s), dx_r = dx.clone();
      ref::rope_backward(dx_r, dout, 10000.0f, pos0);
      Tensor dxg = on_gpu(dx);
      rope_backward(dxg, on_gpu(dout), 10000.0f, pos0);
      EXPECT_TRUE(gpu_close(dxg, dx_r, tol()));
    }
  }
}

TEST_P(CudaNnOps, RopePositions) {
  Shape s{2, 6, 2, 32};
  Tensor pos = Tensor::from_vector<int32_t>({9, 3, 0, 4000, 17, 17}, Shape{6});
  Tensor x = rnd(s), out_r = Tensor::empty(s, dt());
  ref::rope_forward(out_r, x, 500000.0f, pos);
  Tensor posg = on_gpu(pos), out = on_gpu(out_r);
  rope_forward(out, on_gpu(x), 500000.0f, posg);
  EXPECT_TRUE(gpu_close(out, out_r, tol()));
  Tensor dout = rnd(s), dx = rnd(s), dx_r = dx.clone();
  ref::rope_backward(dx_r, dout, 500000.0f, pos);
  Tensor dxg = on_gpu(dx);
  rope_backward(dxg, on_gpu(dout), 500000.0f, posg);
  EXPECT_TRUE(gpu_close(dxg, dx_r, tol()));
  // Consecutive positions give the same bits as the pos0 form.
  Tensor consecutive = Tensor::from_vector<int32_t>({5, 6, 7, 8, 9, 10}, Shape{6});
  Tensor a = on_gpu(out_r), b = on_gpu(out_r), xg = on_gpu(x);
  rope_forward(a, xg, 10000.0f, on_gpu(consecutive));
  rope_forward(b, xg, 10000.0f, int64_t{5});
  EXPECT_TRUE(gpu_close(a, on_cpu(b), 0.0));
  // A negative position throws.
  Tensor bad = on_gpu(Tensor::from_vector<int32_t>({0, 1, -2, 3, 4, 5}, Shape{6}));
  EXPECT_THROW(rope_forward(a, xg, 10000.0f, bad), braid::Error);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaNnOps, float_dtypes(), dtype_param_name);

}  // namespace
}  // namespace braid::kernels::test
