// LayerNorm and RMSNorm over the last dimension (inp viewed as [N,C]).
//   inp[N,C], weight[C], bias[C], out[N,C], mean[N] (f32), rstd[N] (f32)
//   layernorm: out = (x - mean) * rstd * weight + bias, rstd = 1/sqrt(var + eps) (biased var)
//   rmsnorm:   out = x * rstd * weight, rstd = 1/sqrt(mean(x^2) + eps)
// Backward (llm.c layernorm_backward): with norm = (x - mean) * rstd and dnorm = dout * weight,
//   dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm))   (rmsnorm: no mean(dnorm))
//   dweight += sum_n dout * norm; dbias += sum_n dout
// Parameter gradients are reduced per thread in f64 over a fixed row split, then summed in
// thread order (deterministic for a given thread count) and added once into dweight/dbias,
// which may be f32 for bf16 or f16 inputs (Note [Parameter gradients], ops.h). A row's sums
// are vector reductions (lanes summed in a fixed order: the same bits on every run and thread
// count): strictly sequential float adds wait on each other's latency, and layernorm's forward
// over bench-small's [2048, 384] took 0.80 ms of it.
#include <cmath>

#include "braid/kernels/cpu/common.h"
#include "braid/kernels/device.h"
#include "braid/kernels/ops.h"

namespace braid::kernels {

using namespace cpu;

namespace {

void check_norm(const char* op, const Tensor& inp, const Tensor& weight, const Tensor* bias,
                int64_t* N, int64_t* C) {
  check_float(op, "inp", inp);
  check_same_dtype(op, "weight", weight, "inp", inp);
  *C = cols_of(inp);
  *N = rows_of(inp);
  BRAID_CHECK(weight.numel() == *C, op, ": weight has shape ", weight.shape().str(), " but inp ",
              inp.shape().str(), " has C=", *C);
  if (bias) {
    check_same_dtype(op, "bias", *bias, "inp", inp);
    BRAID_CHECK(bias->numel() == *C, op, ": bias has shape ", bias->shape().str(), " but inp ",
                inp.shape().str(), " has C=", *C);
  }
}

void check_stat(const char* op, const char* name, const Tensor& t, int64_t N) {
  check_dtype(op, name, t, DType::f32);
  check_numel(op, name, t, N);
}

// Shared backward of both norms. mean == nullptr selects rmsnorm.
template <typename T>
void norm_backward(T* dinp, Tensor* dweight, Tensor* dbias, const T* dout, const T* inp,
                   const T* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  int nt = num_threads();
  bool want_params = dweight || dbias;
  double* partial = want_params ? scratch_f64(0, 2 * C * nt) : nullptr;
  const TeamScratch<float> w_s(0, 6 * C, nt);
#pragma omp parallel num_threads(nt)
  {
    int id = omp_get_thread_num(), used = omp_get_num_threads();
    double* pw = want_params ? partial + 2 * C * id : nullptr;
    double* pb = want_params ? pw + C : nullptr;
    if (want_params)
      for (int64_t c = 0; c < 2 * C; ++c) pw[c] = 0;
    float* w = w_s.mine();
    float* norm = w + C;
    float* dnorm = w + 2 * C;
    float* xbuf = w + 3 * C;  // Note [Blocked loops]: bf16/f16 rows in f32
    float* gbuf = w + 4 * C;
    float* dbuf = w + 5 * C;
    load_row(w, weight, C);
    int64_t per = (N + used - 1) / used, n0 = std::min<int64_t>(N, id * per);
    int64_t n1 = std::min<int64_t>(N, n0 + per);
    for (int64_t n = n0; n < n1; ++n) {
      const float* x = f32_copy(inp + n * C, C, xbuf);
      const float* g = f32_copy(dout + n * C, C, gbuf);  // read twice
      float mu = mean ? mean[n] : 0.0f, rs = rstd[n];
      float sum_dnorm = 0, sum_dnorm_norm = 0;
#pragma omp simd reduction(+ : sum_dnorm, sum_dnorm_norm)
      for (int64_t c = 0; c < C; ++c) {
        norm[c] = (x[c] - mu) * rs;
        dnorm[c] = g[c] * w[c];
        sum_dnorm += dnorm[c];
        sum_dnorm_norm += dnorm[c] * norm[c];
      }
      float a = mean ? sum_dnorm / static_cast<float>(C) : 0.0f;
      float b = sum_dnorm_norm / static_cast<float>(C);
      if (dinp) {
        float* di = f32_inout(dinp + n * C, C, dbuf);
        for (int64_t c = 0; c < C; ++c) di[c] = di[c] + rs * (dnorm[c] - a - norm[c] * b);
        commit(dinp + n * C, di, C);
      }
      if (want_params) {
        for (int64_t c = 0; c < C; ++c) {
          float gc = g[c];
          pw[c] += static_cast<double>(gc * norm[c]);
          pb[c] += static_cast<double>(gc);
        }
      }
    }
    if (want_params) {
#pragma omp barrier  // all partials written; reduce them in thread order into thread 0's
#pragma omp for schedule(static)
      for (int64_t c = 0; c < C; ++c) {
        double sw = 0, sb = 0;
        for (int k = 0; k < used; ++k) {
          sw += partial[2 * C * k + c];
          sb += partial[2 * C * k + C + c];
        }
        partial[c] = sw;
        partial[C + c] = sb;
      }
    }
  }
  if (dweight) add_sums(*dweight, partial, C);
  if (dbias) add_sums(*dbias, partial + C, C);
}

}  // namespace

void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, float eps) {
  const char* op = "layernorm_forward";
  int64_t N, C;
  check_norm(op, inp, weight, &bias, &N, &C);
  check_same_dtype(op, "out", out, "inp", inp);
  check_numel(op, "out", out, N * C);
  check_stat(op, "mean", mean, N);
  check_stat(op, "rstd", rstd, N);
  BRAID_DEVICE_DISPATCH(layernorm_forward, (out, mean, rstd, inp, weight, bias, eps), &out, &mean,
                        &rstd, &inp, &weight, &bias);
  check_cpu(op, {&out, &mean, &rstd, &inp, &weight, &bias});
  dispatch_float(inp.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* x = inp.data<T>();
    const T* w = weight.data<T>();
    const T* b = bias.data<T>();
    T* o = out.data<T>();
    float* pm = mean.data<float>();
    float* pr = rstd.data<float>();
    const TeamScratch<float> row_s(0, 4 * C);
#pragma omp parallel
    {
      float* row = row_s.mine();
      float* wf = row + C;
      float* bf = row + 2 * C;
      float* obuf = row + 3 * C;  // Note [Blocked loops]
      load_row(wf, w, C);
      load_row(bf, b, C);
#pragma omp for schedule(static)
      for (int64_t n = 0; n < N; ++n) {
        load_row(row, x + n * C, C);
        float s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < C; ++c) s += row[c];
        float mu = s / static_cast<float>(C);
        float v = 0;
#pragma omp simd reduction(+ : v)
        for (int64_t c = 0; c < C; ++c) v += (row[c] - mu) * (row[c] - mu);
        float rs = 1.0f / std::sqrt(v / static_cast<float>(C) + eps);
        float* orow = f32_out(o + n * C, obuf);
        for (int64_t c = 0; c < C; ++c) orow[c] = (row[c] - mu) * rs * wf[c] + bf[c];
        commit(o + n * C, orow, C);
        pm[n] = mu;
        pr[n] = rs;
      }
    }
  });
}

void layernorm_backward(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd) {
  const char* op = "layernorm_backward";
  int64_t N, C;
  check_norm(op, inp, weight, nullptr, &N, &C);
  check_same_dtype(op, "dout", dout, "inp", inp);
  check_numel(op, "dout", dout, N * C);
  check_stat(op, "mean", mean, N);
  check_stat(op, "rstd", rstd, N);
  if (dinp) check_same_dtype(op, "dinp", *dinp, "inp", inp), check_numel(op, "dinp", *dinp, N * C);
  if (dweight)
    check_param_grad(op, "dweight", *dweight, "inp", inp), check_numel(op, "dweight", *dweight, C);
  if (dbias) check_param_grad(op, "dbias", *dbias, "inp", inp), check_numel(op, "dbias", *dbias, C);
  BRAID_DEVICE_DISPATCH(layernorm_backward, (dinp, dweight, dbias, dout, inp, weight, mean, rstd),
                        dinp, dweight, dbias, &dout, &inp, &weight, &mean, &rstd);
  check_cpu(op, {dinp, dweight, dbias, &dout, &inp, &weight, &mean, &rstd});
  dispatch_float(inp.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    norm_backward<T>(dinp ? dinp->data<T>() : nullptr, dweight, dbias, dout.data<T>(),
                     inp.data<T>(), weight.data<T>(), mean.data<float>(), rstd.data<float>(), N, C);
  });
}

void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                     float eps) {
  const char* op = "rmsnorm_forward";
  int64_t N, C;
  check_norm(op, inp, weight, nullptr, &N, &C);
  check_same_dtype(op, "out", out, "inp", inp);
  check_numel(op, "out", out, N * C);
  check_stat(op, "rstd", rstd, N);
  BRAID_DEVICE_DISPATCH(rmsnorm_forward, (out, rstd, inp, weight, eps), &out, &rstd, &inp, &weight);
  check_cpu(op, {&out, &rstd, &inp, &weight});
  dispatch_float(inp.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* x = inp.data<T>();
    const T* w = weight.data<T>();
    T* o = out.data<T>();
    float* pr = rstd.data<float>();
    const TeamScratch<float> row_s(0, 3 * C);
#pragma omp parallel
    {
      float* row = row_s.mine();
      float* wf = row + C;
      float* obuf = row + 2 * C;  // Note [Blocked loops]
      load_row(wf, w, C);
#pragma omp for schedule(static)
      for (int64_t n = 0; n < N; ++n) {
        load_row(row, x + n * C, C);
        float s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < C; ++c) s += row[c] * row[c];
        float rs = 1.0f / std::sqrt(s / static_cast<float>(C) + eps);
        float* orow = f32_out(o + n * C, obuf);
        for (int64_t c = 0; c < C; ++c) orow[c] = row[c] * rs * wf[c];
        commit(o + n * C, orow, C);
        pr[n] = rs;
      }
    }
  });
}

void rmsnorm_backward(Tensor* dinp, Tensor* dweight, const Tensor& dout, const Tensor& inp,
                      const Tensor& weight, const Tensor& rstd) {
  const char* op = "rmsnorm_backward";
  int64_t N, C;
  check_norm(op, inp, weight, nullptr, &N, &C);
  check_same_dtype(op, "dout", dout, "inp", inp);
  check_numel(op, "dout", dout, N * C);
  check_stat(op, "rstd", rstd, N);
  if (dinp) check_same_dtype(op, "dinp", *dinp, "inp", inp), check_numel(op, "dinp", *dinp, N * C);
  if (dweight)
    check_param_grad(op, "dweight", *dweight, "inp", inp), check_numel(op, "dweight", *dweight, C);
  BRAID_DEVICE_DISPATCH(rmsnorm_backward, (dinp, dweight, dout, inp, weight, rstd), dinp, dweight,
                        &dout, &inp, &weight, &rstd);
  check_cpu(op, {dinp, dweight, &dout, &inp, &weight, &rstd});
  dispatch_float(inp.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    norm_backward<T>(dinp ? dinp->data<T>() : nullptr, dweight, nullptr, dout.data<T>(),
                     inp.data<T>(), weight.data<T>(), nullptr, rstd.data<float>(), N, C);
  });
}

}  // namespace braid::kernels
