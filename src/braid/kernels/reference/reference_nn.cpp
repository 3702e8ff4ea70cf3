// Reference norms, activations, rope, attention (materialises T x T) and LM-head
// cross-entropy: the formulas of ops.h as plain loops in f64 (test oracles).
#include <cmath>

#include "braid/kernels/reference/reference.h"
#include "braid/kernels/reference/util.h"

namespace braid::kernels::reference {

void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, float eps) {
  int64_t C = last_dim(inp), N = inp.numel() / C;
  Vec x = get(inp), w = get(weight), b = get(bias), o(N * C), mu(N), rs(N);
  for (int64_t n = 0; n < N; ++n) {
    double s = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) s += x[n * C + c];
    mu[n] = s / C;
    for (int64_t c = 0; c < C; ++c) v += (x[n * C + c] - mu[n]) * (x[n * C + c] - mu[n]);
    rs[n] = 1.0 / std::sqrt(v / C + eps);
    for (int64_t c = 0; c < C; ++c) o[n * C + c] = (x[n * C + c] - mu[n]) * rs[n] * w[c] + b[c];
  }
  put(out, o);
  put(mean, mu);
  put(rstd, rs);
}

void layernorm_backward(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd) {
  int64_t C = last_dim(inp), N = inp.numel() / C;
  Vec x = get(inp), w = get(weight), g = get(dout), mu = get(mean), rs = get(rstd);
  Vec di(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    // d/dx of y_c = (x_c - mu) rs w_c + b_c, written out with full sums.
    double a = 0, bsum = 0;
    for (int64_t c = 0; c < C; ++c) {
      double xhat = (x[n * C + c] - mu[n]) * rs[n];
      double dxhat = g[n * C + c] * w[c];
      a += dxhat;
      bsum += dxhat * xhat;
      dw[c] += g[n * C + c] * xhat;
      db[c] += g[n * C + c];
    }
    for (int64_t c = 0; c < C; ++c) {
      double xhat = (x[n * C + c] - mu[n]) * rs[n];
      di[n * C + c] = rs[n] * (g[n * C + c] * w[c] - a / C - xhat * bsum / C);
    }
  }
  add_into(dinp, di);
  add_into(dweight, dw);
  add_into(dbias, db);
}

void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                     float eps) {
  int64_t C = last_dim(inp), N = inp.numel() / C;
  Vec x = get(inp), w = get(weight), o(N * C), rs(N);
  for (int64_t n = 0; n < N; ++n) {
    double s = 0;
    for (int64_t c = 0; c < C; ++c) s += x[n * C + c] * x[n * C + c];
    rs[n] = 1.0 / std::sqrt(s / C + eps);
    for (int64_t c = 0; c < C; ++c) o[n * C + c] = x[n * C + c] * rs[n] * w[c];
  }
  put(out, o);
  put(rstd, rs);
}

void rmsnorm_backward(Tensor* dinp, Tensor* dweight, const Tensor& dout, const Tensor& inp,
                      const Tensor& weight, const Tensor& rstd) {
  int64_t C = last_dim(inp), N = inp.numel() / C;
  Vec x = get(inp), w = get(weight), g = get(dout), rs = get(rstd);
  Vec di(N * C, 0.0), dw(C, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    // y_c = x_c r w_c with r = (mean x^2 + eps)^-1/2, dr/dx_c = -r^3 x_c / C
    double gx = 0;
    for (int64_t c = 0; c < C; ++c) gx += g[n * C + c] * w[c] * x[n * C + c];
    double r = rs[n];
    for (int64_t c = 0; c < C; ++c) {
      di[n * C + c] = g[n * C + c] * w[c] * r - gx * r * r * r * x[n * C + c] / C;
      dw[c] += g[n * C + c] * x[n * C + c] * r;
    }
  }
  add_into(dinp, di);
  add_into(dweight, dw);
}

namespace {
const double kK = std::sqrt(2.0 / M_PI);
double gelu(double x) {
  return 0.5 * x * (1 + std::tanh(kK * (x + 0.044715 * x * x * x)));
}
double sigmoid(double x) {
  return 1 / (1 + std::exp(-x));
}
}  // namespace

void gelu_forward(Tensor& out, const Tensor& inp) {
  Vec x = get(inp);
  for (auto& e : x) e = gelu(e);
  put(out, x);
}

void gelu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate) {
  Vec x = get(inp), g = get(dout), d(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double u = kK * (x[i] + 0.044715 * x[i] * x[i] * x[i]), th = std::tanh(u);
    double du = kK * (1 + 3 * 0.044715 * x[i] * x[i]);
    d[i] = g[i] * (0.5 * (1 + th) + 0.5 * x[i] * (1 - th * th) * du);
  }
  if (accumulate) {
    add_into(&dinp, d);
  } else {
    put(dinp, d);
  }
}

void swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up) {
  Vec g = get(gate), u = get(up);
  for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] * sigmoid(g[i]) * u[i];
  put(out, g);
}

void swiglu_backward(Tensor* dgate, Tensor* dup, const Tensor& dout, const Tensor& gate,
                     const Tensor& up) {
  Vec g = get(gate), u = get(up), d = get(dout), dg(g.size()), du(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    double s = sigmoid(g[i]);
    dg[i] = d[i] * u[i] * (s + g[i] * s * (1 - s));
    du[i] = d[i] * g[i] * s;
  }
  add_into(dgate, dg);
  add_into(dup, du);
}

namespace {
// out = R(angle) x per pair (i, i+half); sign -1 applies R^T. Row t is at position pos[t]
// (pos0 + t when pos is null).
Vec rotate(const Tensor& x, float theta, int64_t pos0, const int32_t* pos, double sign) {
  int64_t B = x.size(0), T = x.size(1), NH = x.size(2), HS = x.size(3), half = HS / 2;
  Vec v = get(x), o(v.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < NH; ++h)
        for (int64_t i = 0; i < half; ++i) {
          // HF computes inv_freq and the angle in f32.
          float inv_freq = 1.0f / std::pow(theta, static_cast<float>(2 * i) / HS);
          float ang = static_cast<float>(pos ? pos[t] : pos0 + t) * inv_freq;
          double c = std::cos(ang), s = std::sin(ang);
          int64_t base = ((b * T + t) * NH + h) * HS;
          double x1 = v[base + i], x2 = v[base + i + half];
          o[base + i] = x1 * c - sign * x2 * s;
          o[base + i + half] = x2 * c + sign * x1 * s;
        }
  return o;
}
}  // namespace

void rope_forward(Tensor& out, const Tensor& x, float theta, int64_t pos0) {
  put(out, rotate(x, theta, pos0, nullptr, 1.0));
}

void rope_backward(Tensor& dx, const Tensor& dout, float theta, int64_t pos0) {
  add_into(&dx, rotate(dout, theta, pos0, nullptr, -1.0));
}

void rope_forward(Tensor& out, const Tensor& x, float theta, const Tensor& positions) {
  put(out, rotate(x, theta, 0, positions.data<int32_t>(), 1.0));
}

void rope_backward(Tensor& dx, const Tensor& dout, float theta, const Tensor& positions) {
  add_into(&dx, rotate(dout, theta, 0, positions.data<int32_t>(), -1.0));
}

// Query i sees keys [0, n) with n = i + 1 (causal, Tq == Tk) or Tk.
void attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       bool causal) {
  int64_t B = q.size(0), Tq = q.size(1), Tk = k.size(1), NH = q.size(2), NKV = k.size(2),
          HS = q.size(3);
  Vec Q = get(q), K = get(k), V = get(v), O(Q.size(), 0.0), L(B * NH * Tq);
  double sc = 1.0 / std::sqrt(static_cast<double>(HS));
  Vec S(Tk);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h) {
      int64_t kh = h / (NH / NKV);
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t n = causal ? i + 1 : Tk;
        double mx = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t d = 0; d < HS; ++d)
            s += Q[((b * Tq + i) * NH + h) * HS + d] * K[((b * Tk + j) * NKV + kh) * HS + d];
          S[j] = s * sc;
          mx = std::max(mx, S[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < n; ++j) sum += std::exp(S[j] - mx);
        L[(b * NH + h) * Tq + i] = mx + std::log(sum);
        for (int64_t j = 0; j < n; ++j) {
          double p = std::exp(S[j] - mx) / sum;
          for (int64_t d = 0; d < HS; ++d)
            O[((b * Tq + i) * NH + h) * HS + d] += p * V[((b * Tk + j) * NKV + kh) * HS + d];
        }
      }
    }
  put(out, O);
  put(lse, L);
}

// The gradient of this call's own attention: out and lse are taken to be this call's forward
// (Note [Attention over key blocks] in ops.h: the kernel's per-block contract is checked
// against a whole attention in attention_cross_test.cpp, not here).
void attention_backward(Tensor* dq, Tensor* dk, Tensor* dv, const Tensor& dout, const Tensor& q,
                        const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        bool causal) {
  (void)out;
  (void)lse;  // the reference recomputes the softmax from scratch
  int64_t B = q.size(0), Tq = q.size(1), Tk = k.size(1), NH = q.size(2), NKV = k.size(2),
          HS = q.size(3);
  Vec Q = get(q), K = get(k), V = get(v), G = get(dout);
  Vec dQ(Q.size(), 0.0), dK(K.size(), 0.0), dV(V.size(), 0.0), P(Tk), dP(Tk);
  double sc = 1.0 / std::sqrt(static_cast<double>(HS));
  auto qi = [&](int64_t b, int64_t t, int64_t h) { return ((b * Tq + t) * NH + h) * HS; };
  auto ki = [&](int64_t b, int64_t t, int64_t h) { return ((b * Tk + t) * NKV + h) * HS; };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h) {
      int64_t kh = h / (NH / NKV);
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t n = causal ? i + 1 : Tk;
        double mx = -INFINITY, sum = 0, pdp = 0;
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t d = 0; d < HS; ++d) s += Q[qi(b, i, h) + d] * K[ki(b, j, kh) + d];
          P[j] = s * sc;
          mx = std::max(mx, P[j]);
        }
        for (int64_t j = 0; j < n; ++j) sum += (P[j] = std::exp(P[j] - mx));
        for (int64_t j = 0; j < n; ++j) {
          P[j] /= sum;
          dP[j] = 0;
          for (int64_t d = 0; d < HS; ++d) dP[j] += G[qi(b, i, h) + d] * V[ki(b, j, kh) + d];
          pdp += P[j] * dP[j];
        }
        for (int64_t j = 0; j < n; ++j) {
          double ds = P[j] * (dP[j] - pdp) * sc;
          for (int64_t d = 0; d < HS; ++d) {
            dV[ki(b, j, kh) + d] += P[j] * G[qi(b, i, h) + d];
            dQ[qi(b, i, h) + d] += ds * K[ki(b, j, kh) + d];
            dK[ki(b, j, kh) + d] += ds * Q[qi(b, i, h) + d];
          }
        }
      }
    }
  add_into(dq, dQ);
  add_into(dk, dK);
  add_into(dv, dV);
}

namespace {
// logits[n, v] in f64
Vec logits_of(const Tensor& x, const Tensor& weight) {
  int64_t C = weight.size(1), V = weight.size(0), N = x.numel() / C;
  Vec X = get(x), W = get(weight), Z(N * V);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < V; ++v) {
      double s = 0;
      for (int64_t c = 0; c < C; ++c) s += X[n * C + c] * W[v * C + c];
      Z[n * V + v] = s;
    }
  return Z;
}
}  // namespace

void attention_merge(Tensor& out_acc, Tensor& lse_acc, const Tensor& out, const Tensor& lse,
                     int64_t t0) {
  const int64_t B = out_acc.size(0), rows = out_acc.size(1), NH = out_acc.size(2),
                HS = out_acc.size(3), n = out.size(1);
  Vec acc = get(out_acc), lacc = get(lse_acc), o = get(out), l = get(lse);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < NH; ++h) {
        double& la = lacc[(b * NH + h) * rows + t0 + t];
        const double lb = l[(b * NH + h) * n + t];
        const double merged = std::isinf(la) && la < 0 ? lb : std::log(std::exp(la) + std::exp(lb));
        const double wa = std::exp(la - merged), wb = std::exp(lb - merged);
        for (int64_t x = 0; x < HS; ++x) {
          double& a = acc[((b * rows + t0 + t) * NH + h) * HS + x];
          a = a * wa + o[((b * n + t) * NH + h) * HS + x] * wb;
        }
        la = merged;
      }
  put(out_acc, acc);
  put(lse_acc, lacc);
}

double lm_head_ce_forward(Tensor& lse, int64_t* count, const Tensor& x, const Tensor& weight,
                          const Tensor& targets, int32_t ignore_index) {
  int64_t V = weight.size(0), N = targets.numel();
  Vec Z = logits_of(x, weight), L(N);
  const int32_t* t = targets.data<int32_t>();
  double loss = 0;
  int64_t cnt = 0;
  for (int64_t n = 0; n < N; ++n) {
    double mx = -INFINITY, s = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, Z[n * V + v]);
    for (int64_t v = 0; v < V; ++v) s += std::exp(Z[n * V + v] - mx);
    L[n] = mx + std::log(s);
    if (t[n] == ignore_index) continue;
    BRAID_CHECK(t[n] >= 0 && t[n] < V, "reference lm_head_ce: target ", t[n], " at ", n);
    loss += L[n] - Z[n * V + t[n]];
    ++cnt;
  }
  put(lse, L);
  if (count) *count = cnt;
  return loss;
}

void lm_head_ce_backward(Tensor* dx, Tensor* dweight, const Tensor& x, const Tensor& weight,
                         const Tensor& targets, const Tensor& lse, float scale,
                         int32_t ignore_index) {
  (void)lse;  // recomputed in f64
  int64_t C = weight.size(1), V = weight.size(0), N = targets.numel();
  Vec Z = logits_of(x, weight), X = get(x), W = get(weight), dX(N * C, 0.0), dW(V * C, 0.0);
  const int32_t* t = targets.data<int32_t>();
  for (int64_t n = 0; n < N; ++n) {
    if (t[n] == ignore_index) continue;
    double mx = -INFINITY, s = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, Z[n * V + v]);
    for (int64_t v = 0; v < V; ++v) s += std::exp(Z[n * V + v] - mx);
    for (int64_t v = 0; v < V; ++v) {
      double g = (std::exp(Z[n * V + v] - mx) / s - (v == t[n] ? 1.0 : 0.0)) * scale;
      for (int64_t c = 0; c < C; ++c) {
        dX[n * C + c] += g * W[v * C + c];
        dW[v * C + c] += g * X[n * C + c];
      }
    }
  }
  add_into(dx, dX);
  add_into(dweight, dW);
}

double lm_head_ce_forward_backward(Tensor& lse, int64_t* count, Tensor* dx, Tensor* dweight,
                                   const Tensor& x, const Tensor& weight, const Tensor& targets,
                                   float scale, int32_t ignore_index) {
  double loss = lm_head_ce_forward(lse, count, x, weight, targets, ignore_index);
  lm_head_ce_backward(dx, dweight, x, weight, targets, lse, scale, ignore_index);
  return loss;
}

void lm_head_ce_partial_forward(Tensor& row_max, Tensor& sumexp, Tensor& target_logit,
                                const Tensor& x, const Tensor& weight, const Tensor& targets,
                                int64_t v0, int64_t valid, int32_t ignore_index) {
  int64_t Vl = weight.size(0), N = targets.numel();
  Vec Z = logits_of(x, weight), M(N), S(N), TL(N);
  const int32_t* t = targets.data<int32_t>();
  for (int64_t n = 0; n < N; ++n) {
    double mx = -INFINITY, s = 0;
    for (int64_t v = 0; v < valid; ++v) mx = std::max(mx, Z[n * Vl + v]);
    for (int64_t v = 0; v < valid; ++v) s += std::exp(Z[n * Vl + v] - mx);
    M[n] = mx;
    S[n] = s;
    const bool local = t[n] != ignore_index && t[n] >= v0 && t[n] < v0 + valid;
    TL[n] = local ? Z[n * Vl + (t[n] - v0)] : 0.0;
  }
  put(row_max, M);
  put(sumexp, S);
  put(target_logit, TL);
}

void lm_head_ce_partial_backward(Tensor* dx, Tensor* dweight, const Tensor& x, const Tensor& weight,
                                 const Tensor& targets, const Tensor& lse, float scale, int64_t v0,
                                 int64_t valid, int32_t ignore_index) {
  int64_t C = weight.size(1), Vl = weight.size(0), N = targets.numel();
  Vec Z = logits_of(x, weight), X = get(x), W = get(weight), L = get(lse);
  Vec dX(N * C, 0.0), dW(Vl * C, 0.0);
  const int32_t* t = targets.data<int32_t>();
  for (int64_t n = 0; n < N; ++n) {
    if (t[n] == ignore_index) continue;
    for (int64_t v = 0; v < valid; ++v) {
      double g = (std::exp(Z[n * Vl + v] - L[n]) - (v0 + v == t[n] ? 1.0 : 0.0)) * scale;
      for (int64_t c = 0; c < C; ++c) {
        dX[n * C + c] += g * W[v * C + c];
        dW[v * C + c] += g * X[n * C + c];
      }
    }
  }
  add_into(dx, dX);
  add_into(dweight, dW);
}

void lm_head_logits(Tensor& logits, const Tensor& x, const Tensor& weight) {
  put(logits, logits_of(x, weight));
}

}  // namespace braid::kernels::reference
