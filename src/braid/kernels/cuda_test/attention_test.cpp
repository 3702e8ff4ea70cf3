// CUDA flash attention (cuda/attention.cu) against the naive reference twin: causal and not,
// GQA, head sizes the tensor-core path takes (64, 128) and others, tails of every tile, both
// the generic and the tensor-core path, gradients accumulated into nonzero buffers, and some
// gradients not wanted.
#include <cmath>
#include <utility>
#include <vector>

#include "braid/kernels/cuda_test/cuda_test_util.h"
#include "braid/kernels/ops.h"
#include "braid/kernels/reference/reference.h"

namespace braid::kernels::cuda {
// 0: as BRAID_CUDA_ATTENTION says, 1: the generic path, 2: the tensor-core path where it
// applies (attention.cu).
void set_attention_path_for_testing(int path);
}  // namespace braid::kernels::cuda

namespace braid::kernels::test {
namespace {

namespace ref = braid::kernels::reference;

// Restores the default path when a test ends, however it ends.
struct PathGuard {
  explicit PathGuard(int path) { cuda::set_attention_path_for_testing(path); }
  ~PathGuard() { cuda::set_attention_path_for_testing(0); }
  PathGuard(const PathGuard&) = delete;
  PathGuard& operator=(const PathGuard&) = delete;
};

struct Case {
  int64_t B, Tq, Tk, NH, NKV, HS;
  bool causal;
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << "B=" << c.B << " Tq=" << c.Tq << " Tk=" << c.Tk << " NH=" << c.NH << " NKV=" << c.NKV
            << " HS=" << c.HS << (c.causal ? " causal" : " not causal");
}

class CudaAttention : public CudaKernelTest {
 protected:
  // The paths that take dtype/HS: the generic one always, the tensor-core one for bf16 and
  // f16 with HS 64 or 128.
  std::vector<int> paths(int64_t HS) const {
    if (dt() != DType::f32 && (HS == 64 || HS == 128)) return {1, 2};
    return {1};
  }

  void check(const Case& c) {
    SCOPED_TRACE(::testing::Message() << c);
    Shape qs{c.B, c.Tq, c.NH, c.HS}, ks{c.B, c.Tk, c.NKV, c.HS};
    Tensor q = rnd(qs), k = rnd(ks), v = rnd(ks);
    Tensor out_r = Tensor::empty(qs, dt()), lse_r = Tensor::empty(Shape{c.B, c.NH, c.Tq});
    ref::attention_forward(out_r, lse_r, q, k, v, c.causal);
    Tensor dout = rnd(qs), dq0 = rnd(qs), dk0 = rnd(ks), dv0 = rnd(ks);
    Tensor dq_r = dq0.clone(), dk_r = dk0.clone(), dv_r = dv0.clone();
    ref::attention_backward(&dq_r, &dk_r, &dv_r, dout, q, k, v, out_r, lse_r, c.causal);
    Tensor q_g = on_gpu(q), k_g = on_gpu(k), v_g = on_gpu(v), dout_g = on_gpu(dout);
    Tensor out_rg = on_gpu(out_r), lse_rg = on_gpu(lse_r);
    for (int path : paths(c.HS)) {
      SCOPED_TRACE(path == 1 ? "generic path" : "tensor-core path");
      PathGuard guard(path);
      Tensor out = on_gpu(Tensor::zeros(qs, dt())), lse = on_gpu(Tensor::zeros(lse_r.shape()));
      attention_forward(out, lse, q_g, k_g, v_g, c.causal);
      EXPECT_TRUE(close(on_cpu(out), out_r, tol()));
      EXPECT_TRUE(close(on_cpu(lse), lse_r, 2e-5));
      // The backward from the reference's out and lse, so it is checked on its own.
      Tensor dq = on_gpu(dq0), dk = on_gpu(dk0), dv = on_gpu(dv0);
      attention_backward(&dq, &dk, &dv, dout_g, q_g, k_g, v_g, out_rg, lse_rg, c.causal);
      EXPECT_TRUE(close(on_cpu(dq), dq_r, tol()));
      EXPECT_TRUE(close(on_cpu(dk), dk_r, tol()));
      EXPECT_TRUE(close(on_cpu(dv), dv_r, tol()));
      // Only dk; then only dq and dv.
      Tensor dk1 = on_gpu(dk0);
      attention_backward(nullptr, &dk1, nullptr, dout_g, q_g, k_g, v_g, out_rg, lse_rg, c.causal);
      EXPECT_TRUE(close(on_cpu(dk1), dk_r, tol()));
      Tensor dq2 = on_gpu(dq0), dv2 = on_gpu(dv0);
      attention_backward(&dq2, nullptr, &dv2, dout_g, q_g, k_g, v_g, out_rg, lse_rg, c.causal);
      EXPECT_TRUE(close(on_cpu(dq2), dq_r, tol()));
      EXPECT_TRUE(close(on_cpu(dv2), dv_r, tol()));
    }
  }
};

TEST_P(CudaAttention, Causal) {
  // Tails of the 16/32/64 tiles, a single token, GQA 4/2, 8/1 and 12/12, head sizes 16, 64,
  // 128 and two the tensor-core path does not take (80, 256).
  for (Case c : {Case{2, 17, 17, 4, 2, 16, true}, Case{1, 1, 1, 12, 12, 64, true},
                 Case{2, 64, 64, 8, 1, 64, true}, Case{1, 200, 200, 4, 2, 128, true},
                 Case{2, 200, 200, 12, 12, 64, true}, Case{1, 33, 33, 2, 1, 80, true},
                 Case{1, 70, 70, 2, 2, 256, true}})
    check(c);
}

TEST_P(CudaAttention, NotCausal) {
  // Tq != Tk both ways (Note [Attention over key blocks]), a single query or key.
  for (Case c : {Case{1, 17, 200, 4, 2, 64, false}, Case{2, 200, 17, 8, 1, 128, false},
                 Case{2, 64, 64, 12, 12, 16, false}, Case{1, 1, 1, 4, 2, 64, false},
                 Case{1, 70, 1, 4, 4, 128, false}, Case{1, 1, 130, 2, 1, 128, false},
                 Case{1, 40, 70, 2, 2, 256, false}, Case{1, 65, 33, 4, 2, 1, false}})
    check(c);
}

TEST_P(CudaAttention, Long) {
  // One GPT-2-sized sequence: many key tiles per query tile.
  check(Case{1, 1024, 1024, 2, 1, 64, true});
}

TEST_P(CudaAttention, BadArguments) {
  Shape qs{1, 8, 3, 16};
  Tensor q = on_gpu(rnd(qs)), k = on_gpu(rnd(Shape{1, 8, 2, 16})), v = k;
  Tensor out = on_gpu(Tensor::zeros(qs, dt())), lse = on_gpu(Tensor::zeros(Shape{1, 3, 8}));
  EXPECT_ANY_THROW(attention_forward(out, lse, q, k, v, true));  // NH % NKV != 0
  Tensor k2 = on_gpu(rnd(Shape{1, 9, 3, 16}));
  EXPECT_ANY_THROW(attention_forward(out, lse, q, k2, k2, true));  // causal needs Tq == Tk
}

// Note [Attention over key blocks]: blocks merged one by one into accumulators that start empty
// (lse -inf), rows offset, as ring attention does.
TEST_P(CudaAttention, Merge) {
  const int64_t B = 2, T = 6, NH = 3, HS = 67;
  Tensor acc_r = Tensor::zeros(Shape{B, T, NH, HS}, DType::f32);
  Tensor lacc_r = Tensor::full(Shape{B, NH, T}, -INFINITY, DType::f32);
  Tensor acc = on_gpu(acc_r), lacc = on_gpu(lacc_r);
  for (auto [t0, n] : {std::pair<int64_t, int64_t>{0, 6}, {2, 3}, {0, 6}, {5, 1}}) {
    SCOPED_TRACE(::testing::Message() << "t0=" << t0 << " n=" << n);
    Tensor o = rnd(Shape{B, n, NH, HS}), l = rnd(Shape{B, NH, n}).to(DType::f32);
    ref::attention_merge(acc_r, lacc_r, o, l, t0);
    attention_merge(acc, lacc, on_gpu(o), on_gpu(l), t0);
    EXPECT_TRUE(close(on_cpu(acc), acc_r, 1e-5));
    EXPECT_TRUE(close(on_cpu(lacc), lacc_r, 1e-5));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaAttention, float_dtypes(), dtype_param_name);

}  // namespace
}  // namespace braid::kernels::test
