// Attention over a packed projection (Note [Packed qkv], cpu/attention.cpp): the forward and
// backward on qkv[B,T,(NH + 2 NKV) HS] against attention_forward/attention_backward on its
// column slices, bit for bit, for every float dtype, with GQA, T past one tile and not a
// multiple of it, HS not a multiple of 16:
//   - the forward's out and lse;
//   - the backward into a fresh dqkv (set: every element written; the buffer starts as NaN) is
//     the slices' gradients added into zeros;
//   - the backward added into a dqkv that holds values is the slices' backward added into the
//     same values;
//   - shapes that are not a packed projection are refused, naming the op.
#include <cmath>
#include <limits>
#include <string>

#include "braid/core/error.h"
#include "braid/kernels/kernels_test_util.h"
#include "braid/kernels/ops.h"

namespace braid::kernels::test {
namespace {

struct PackedCase {
  int64_t B, T, NH, NKV, HS;
};

class AttentionQkv : public KernelTest {
 protected:
  // Columns [start, start + heads * HS) of qkv as [B,T,heads,HS].
  static Tensor heads(const Tensor& qkv, int64_t start, int64_t n, int64_t HS) {
    const int64_t B = qkv.size(0), T = qkv.size(1);
    Tensor out = Tensor::empty(Shape{B, T, n, HS}, qkv.dtype());
    Tensor rows = out.view(Shape{B * T, n * HS});
    copy_columns(rows, qkv.view(Shape{B * T, qkv.size(2)}), start);
    return out;
  }
  static void put(Tensor& qkv, const Tensor& part, int64_t start) {
    const int64_t rows = qkv.size(0) * qkv.size(1);
    Tensor all = qkv.view(Shape{rows, qkv.size(2)});
    set_columns(all, part.view(Shape{rows, part.numel() / rows}), start);
  }
  static Tensor nans(const Shape& s, DType dt) {
    return Tensor::full(s, std::numeric_limits<double>::quiet_NaN(), dt);
  }
};

void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  const std::vector<float> x = a.to_f32_vector(), y = b.to_f32_vector();
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_FALSE(std::isnan(x[i])) << what << " [" << i << "] was not written";
    ASSERT_EQ(x[i], y[i]) << what << " [" << i << "]";
  }
}

TEST_P(AttentionQkv, EqualsTheKernelsOnTheSlicesBitForBit) {
  for (const PackedCase c :
       {PackedCase{2, 100, 4, 4, 16}, PackedCase{1, 130, 4, 2, 24}, PackedCase{2, 64, 6, 3, 32}}) {
    SCOPED_TRACE("B " + std::to_string(c.B) + " T " + std::to_string(c.T) + " NH " +
                 std::to_string(c.NH) + " NKV " + std::to_string(c.NKV) + " HS " +
                 std::to_string(c.HS));
    const int64_t k0 = c.NH * c.HS, v0 = (c.NH + c.NKV) * c.HS, W = (c.NH + 2 * c.NKV) * c.HS;
    const Tensor qkv = rnd(Shape{c.B, c.T, W});
    const Tensor q = heads(qkv, 0, c.NH, c.HS), k = heads(qkv, k0, c.NKV, c.HS);
    const Tensor v = heads(qkv, v0, c.NKV, c.HS);
    const Shape os{c.B, c.T, c.NH, c.HS}, ls{c.B, c.NH, c.T};

    Tensor out = Tensor::empty(os, dt()), lse = Tensor::empty(ls, DType::f32);
    attention_forward(out, lse, q, k, v);
    Tensor pout = nans(os, dt()), plse = nans(ls, DType::f32);
    attention_forward_qkv(pout, plse, qkv, c.NH, c.NKV);
    expect_same_bits(pout, out, "out");
    expect_same_bits(plse, lse, "lse");

    const Tensor dout = rnd(os);
    // Set: the slices' gradients added into zeros, against a fresh (NaN) dqkv.
    Tensor dq = Tensor::zeros(q.shape(), dt()), dk = Tensor::zeros(k.shape(), dt());
    Tensor dv = Tensor::zeros(v.shape(), dt());
    attention_backward(&dq, &dk, &dv, dout, q, k, v, out, lse);
    Tensor want = Tensor::empty(qkv.shape(), dt());
    put(want, dq, 0), put(want, dk, k0), put(want, dv, v0);
    Tensor dqkv = nans(qkv.shape(), dt());
    attention_backward_qkv(dqkv, dout, qkv, out, lse, c.NH, c.NKV, /*accumulate=*/false);
    expect_same_bits(dqkv, want, "dqkv (set)");

    // Accumulate: into values already there, as the slices' backward adds into its own.
    const Tensor base = rnd(qkv.shape());
    Tensor bq = heads(base, 0, c.NH, c.HS), bk = heads(base, k0, c.NKV, c.HS);
    Tensor bv = heads(base, v0, c.NKV, c.HS);
    attention_backward(&bq, &bk, &bv, dout, q, k, v, out, lse);
    Tensor want_acc = Tensor::empty(qkv.shape(), dt());
    put(want_acc, bq, 0), put(want_acc, bk, k0), put(want_acc, bv, v0);
    Tensor acc = base.clone();
    attention_backward_qkv(acc, dout, qkv, out, lse, c.NH, c.NKV, /*accumulate=*/true);
    expect_same_bits(acc, want_acc, "dqkv (accumulated)");
  }
}

TEST_P(AttentionQkv, RefusesWhatIsNotAPackedProjection) {
  Tensor out = Tensor::empty(Shape{1, 8, 2, 4}, dt()), lse = Tensor::empty(Shape{1, 2, 8});
  const auto message = [&](const Tensor& qkv, int64_t nh, int64_t nkv) {
    try {
      attention_forward_qkv(out, lse, qkv, nh, nkv);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // 20 columns are not a multiple of NH + 2 NKV = 6.
  std::string m = message(rnd(Shape{1, 8, 20}), 2, 2);
  EXPECT_NE(m.find("attention_forward_qkv"), std::string::npos) << m;
  EXPECT_NE(m.find("[1, 8, 20]"), std::string::npos) << m;
  m = message(rnd(Shape{1, 8, 24}), 3, 2);  // NH % NKV != 0
  EXPECT_NE(m.find("NKV=2"), std::string::npos) << m;
  m = message(rnd(Shape{8, 24}), 2, 2);  // not [B,T,W]
  EXPECT_NE(m.find("qkv must be"), std::string::npos) << m;
  m = message(rnd(Shape{1, 8, 36}), 2, 2);  // HS 6: out [1,8,2,4] does not match
  EXPECT_NE(m.find("out"), std::string::npos) << m;
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AttentionQkv, float_dtypes(), dtype_param_name);

}  // namespace
}  // namespace braid::kernels::test
