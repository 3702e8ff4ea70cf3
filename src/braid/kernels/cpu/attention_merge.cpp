// The merge of Note [Attention over key blocks] (ops.h): a block's partial attention into the
// running f32 accumulators of ring attention (parallel/context/ring_attention.cpp).
//   out_acc[B,T,NH,HS], lse_acc[B,NH,T] (f32) absorb out[B,n,NH,HS], lse[B,NH,n] at rows t0..
#include <algorithm>
#include <cmath>

#include "braid/kernels/cpu/common.h"
#include "braid/kernels/device.h"
#include "braid/kernels/ops.h"

namespace braid::kernels {

using namespace cpu;

void attention_merge(Tensor& out_acc, Tensor& lse_acc, const Tensor& out, const Tensor& lse,
                     int64_t t0) {
  const char* op = "attention_merge";
  check_dtype(op, "out_acc", out_acc, DType::f32);
  check_dtype(op, "lse_acc", lse_acc, DType::f32);
  check_dtype(op, "lse", lse, DType::f32);
  check_float(op, "out", out);
  BRAID_CHECK(out_acc.dim() == 4 && out.dim() == 4, op, ": out_acc ", out_acc.shape().str(),
              " and out ", out.shape().str(), " must be [B,T,NH,HS] and [B,n,NH,HS]");
  const int64_t B = out_acc.size(0), rows = out_acc.size(1), NH = out_acc.size(2),
                HS = out_acc.size(3), n = out.size(1);
  check_shape(op, "out", out, Shape{B, n, NH, HS});
  check_shape(op, "lse_acc", lse_acc, Shape{B, NH, rows});
  check_shape(op, "lse", lse, Shape{B, NH, n});
  BRAID_CHECK(t0 >= 0 && t0 + n <= rows, op, ": rows [", t0, ", ", t0 + n, ") out of range for ",
              rows, " accumulated rows");
  BRAID_DEVICE_DISPATCH(attention_merge, (out_acc, lse_acc, out, lse, t0), &out_acc, &lse_acc, &out,
                        &lse);
  check_cpu(op, {&out_acc, &lse_acc, &out, &lse});
  float* acc = out_acc.data<float>();
  float* lacc = lse_acc.data<float>();
  const float* lp = lse.data<float>();
  dispatch_float(out.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* po = out.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t bt = 0; bt < B * n; ++bt) {
      const int64_t b = bt / n, t = bt % n;
      for (int64_t h = 0; h < NH; ++h) {
        float& la = lacc[(b * NH + h) * rows + t0 + t];
        const float lb = lp[(b * NH + h) * n + t];
        const float m = std::max(la, lb);
        const float l = m + std::log(std::exp(la - m) + std::exp(lb - m));
        const float wa = std::exp(la - l), wb = std::exp(lb - l);
        float* a = acc + ((b * rows + t0 + t) * NH + h) * HS;
        const T* p = po + ((b * n + t) * NH + h) * HS;
        for (int64_t x = 0; x < HS; ++x) a[x] = a[x] * wa + ld(p + x) * wb;
        la = l;
      }
    }
  });
}

}  // namespace braid::kernels
