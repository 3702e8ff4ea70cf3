// Reference GEMM, linear, embedding, column slices, cast, element-wise and optimiser steps:
// the formulas of ops.h as plain loops in f64 (test oracles).
#include <cmath>

#include "braid/kernels/reference/reference.h"
#include "braid/kernels/reference/util.h"

namespace braid::kernels::reference {

void matmul(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha,
            float beta) {
  int64_t M = c.size(0), N = c.size(1), K = trans_a ? a.size(0) : a.size(1);
  Vec A = get(a), B = get(b), C = get(c);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) {
        double av = trans_a ? A[k * M + i] : A[i * K + k];
        double bv = trans_b ? B[j * K + k] : B[k * N + j];
        s += av * bv;
      }
      C[i * N + j] = alpha * s + (beta == 0.0f ? 0.0 : beta * C[i * N + j]);
    }
  put(c, C);
}

void linear_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor* bias) {
  int64_t C = weight.size(1), OC = weight.size(0), N = inp.numel() / C;
  Vec x = get(inp), w = get(weight), b = bias ? get(*bias) : Vec(OC, 0.0), o(N * OC);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oc = 0; oc < OC; ++oc) {
      double s = b[oc];
      for (int64_t c = 0; c < C; ++c) s += x[n * C + c] * w[oc * C + c];
      o[n * OC + oc] = s;
    }
  put(out, o);
}

void linear_backward(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight) {
  int64_t C = weight.size(1), OC = weight.size(0), N = inp.numel() / C;
  Vec x = get(inp), w = get(weight), g = get(dout);
  Vec di(N * C, 0.0), dw(OC * C, 0.0), db(OC, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oc = 0; oc < OC; ++oc) {
      double gv = g[n * OC + oc];
      db[oc] += gv;
      for (int64_t c = 0; c < C; ++c) {
        di[n * C + c] += gv * w[oc * C + c];
        dw[oc * C + c] += gv * x[n * C + c];
      }
    }
  add_into(dinp, di);
  add_into(dweight, dw);
  add_into(dbias, db);
}

void embedding_forward(Tensor& out, const Tensor& ids, const Tensor& wte, const Tensor* wpe) {
  int64_t T = ids.size(-1), N = ids.numel(), C = wte.size(1), V = wte.size(0);
  const int32_t* id = ids.data<int32_t>();
  Vec w = get(wte), p = wpe ? get(*wpe) : Vec(), o(N * C);
  for (int64_t n = 0; n < N; ++n) {
    BRAID_CHECK(id[n] >= 0 && id[n] < V, "reference embedding: id ", id[n], " at ", n);
    for (int64_t c = 0; c < C; ++c)
      o[n * C + c] = w[id[n] * C + c] + (wpe ? p[(n % T) * C + c] : 0.0);
  }
  put(out, o);
}

void embedding_backward(Tensor* dwte, Tensor* dwpe, const Tensor& dout, const Tensor& ids) {
  int64_t T = ids.size(-1), N = ids.numel(), C = dout.numel() / N;
  const int32_t* id = ids.data<int32_t>();
  Vec g = get(dout);
  if (dwte) {
    Vec dw(dwte->numel(), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) dw[id[n] * C + c] += g[n * C + c];
    add_into(dwte, dw);
  }
  if (dwpe) {
    Vec dp(dwpe->numel(), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) dp[(n % T) * C + c] += g[n * C + c];
    add_into(dwpe, dp);
  }
}

void embedding_slice_forward(Tensor& out, const Tensor& ids, const Tensor& wte, int64_t v0) {
  int64_t N = ids.numel(), C = wte.size(1), Vl = wte.size(0);
  const int32_t* id = ids.data<int32_t>();
  Vec w = get(wte), o(N * C, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    BRAID_CHECK(id[n] >= 0, "reference embedding_slice: id ", id[n], " at ", n);
    if (id[n] < v0 || id[n] >= v0 + Vl) continue;
    for (int64_t c = 0; c < C; ++c) o[n * C + c] = w[(id[n] - v0) * C + c];
  }
  put(out, o);
}

void embedding_slice_backward(Tensor& dwte, const Tensor& dout, const Tensor& ids, int64_t v0) {
  int64_t N = ids.numel(), C = dout.numel() / N, Vl = dwte.size(0);
  const int32_t* id = ids.data<int32_t>();
  Vec g = get(dout), dw(dwte.numel(), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    if (id[n] < v0 || id[n] >= v0 + Vl) continue;
    for (int64_t c = 0; c < C; ++c) dw[(id[n] - v0) * C + c] += g[n * C + c];
  }
  add_into(&dwte, dw);
}

void copy_columns(Tensor& out, const Tensor& inp, int64_t start) {
  int64_t W = last_dim(out), CT = last_dim(inp), N = out.numel() / W;
  Vec x = get(inp), o(N * W);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t w = 0; w < W; ++w) o[n * W + w] = x[n * CT + start + w];
  put(out, o);
}

void add_columns(Tensor& dinp, const Tensor& dout, int64_t start) {
  int64_t W = last_dim(dout), CT = last_dim(dinp), N = dout.numel() / W;
  Vec g = get(dout), d(dinp.numel(), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t w = 0; w < W; ++w) d[n * CT + start + w] = g[n * W + w];
  add_into(&dinp, d);
}

void set_columns(Tensor& out, const Tensor& inp, int64_t start) {
  int64_t W = last_dim(inp), CT = last_dim(out), N = inp.numel() / W;
  Vec x = get(inp), o = get(out);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t w = 0; w < W; ++w) o[n * CT + start + w] = x[n * W + w];
  put(out, o);
}

void cast(Tensor& out, const Tensor& in) {
  put(out, get(in));  // exact through f64, then core/dtype.h's rounding
}

void add_forward(Tensor& out, const Tensor& a, const Tensor& b) {
  Vec x = get(a), y = get(b);
  for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  put(out, x);
}

void axpy(Tensor& y, const Tensor& x, float alpha) {
  Vec xv = get(x);
  for (auto& e : xv) e *= alpha;
  add_into(&y, xv);
}

void scale(Tensor& x, float alpha) {
  Vec v = get(x);
  for (auto& e : v) e *= alpha;
  put(x, v);
}

double sum_squares(const Tensor& x) {
  double s = 0;
  for (double e : get(x)) s += e * e;
  return s;
}

float max_abs(const Tensor& x) {
  double m = 0;
  for (double e : get(x)) m = std::isnan(e) ? INFINITY : std::max(m, std::fabs(e));
  return static_cast<float>(m);
}

__int128 sum_squares_fixed(const Tensor& x, int shift) {
  __int128 s = 0;
  for (double e : get(x)) s += static_cast<__int128>(std::floor(std::ldexp(e * e, shift)));
  return s;
}

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1,
                float beta2, float eps, float weight_decay, int64_t t) {
  Vec p = get(param), g = get(grad), mv = get(m), vv = get(v);
  double bc1 = 1 - std::pow(double(beta1), double(t)), bc2 = 1 - std::pow(double(beta2), double(t));
  for (size_t i = 0; i < p.size(); ++i) {
    mv[i] = beta1 * mv[i] + (1 - double(beta1)) * g[i];
    vv[i] = beta2 * vv[i] + (1 - double(beta2)) * g[i] * g[i];
    double mhat = mv[i] / bc1, vhat = vv[i] / bc2;
    p[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + double(weight_decay) * p[i]);
  }
  put(param, p);
  put(m, mv);
  put(v, vv);
}

void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buf, float lr, float momentum,
              float weight_decay, bool nesterov, bool first_step) {
  Vec p = get(param), g = get(grad);
  Vec b = momentum != 0.0f ? get(momentum_buf) : Vec(p.size(), 0.0);
  for (size_t i = 0; i < p.size(); ++i) {
    double gi = g[i] + double(weight_decay) * p[i];
    if (momentum != 0.0f) {
      b[i] = first_step ? gi : momentum * b[i] + gi;
      gi = nesterov ? gi + momentum * b[i] : b[i];
    }
    p[i] -= lr * gi;
  }
  put(param, p);
  if (momentum != 0.0f) put(momentum_buf, b);
}

}  // namespace braid::kernels::reference
