// LayerNorm and RMSNorm on the GPU (contract: kernels/ops.h, cpu/norm.cpp), llm.c style.
// Forward and the dinp part of the backward run one warp per row (128-bit loads when the
// pointers are aligned and C is a multiple of the pack size). dweight/dbias are reduced
// deterministically in two stages: column-parallel partial sums over fixed row chunks into
// f32 scratch, then one thread per column sums the chunks in order (in f64) and adds the result
// once into the gradient (its input's dtype or f32, Note [Parameter gradients]).
#include "braid/kernels/checks.h"
#include "braid/kernels/cuda/common.cuh"
#include "braid/kernels/cuda/cuda_ops.h"

namespace braid::kernels::cuda {

namespace {

constexpr int kRowBlock = 256;  // 8 warps, one row each

// One warp per row. mean == nullptr: rmsnorm (no centring, no bias).
template <typename T, int P>
__global__ void norm_forward_kernel(T* __restrict__ out, float* __restrict__ mean,
                                    float* __restrict__ rstd, const T* __restrict__ inp,
                                    const T* __restrict__ weight, const T* __restrict__ bias,
                                    float eps, int64_t N, int64_t C) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const float fc = static_cast<float>(C);
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; n < N;
       n += warps) {
    const T* x = inp + n * C;
    float mu = 0.0f;
    if (mean) {
      float s = 0.0f;
      for (int64_t c = static_cast<int64_t>(lane) * P; c < C; c += 32 * P) {
        float v[P];
        load_vec<T, P>(x + c, v);
#pragma unroll
        for (int j = 0; j < P; ++j) s += v[j];
      }
      mu = warp_sum(s) / fc;
    }
    float ss = 0.0f;
    for (int64_t c = static_cast<int64_t>(lane) * P; c < C; c += 32 * P) {
      float v[P];
      load_vec<T, P>(x + c, v);
#pragma unroll
      for (int j = 0; j < P; ++j) ss += (v[j] - mu) * (v[j] - mu);
    }
    const float rs = 1.0f / sqrtf(warp_sum(ss) / fc + eps);
    T* o = out + n * C;
    for (int64_t c = static_cast<int64_t>(lane) * P; c < C; c += 32 * P) {
      float v[P], w[P], b[P];
      load_vec<T, P>(x + c, v);
      load_vec<T, P>(weight + c, w);
      if (bias) {
        load_vec<T, P>(bias + c, b);
      } else {
#pragma unroll
        for (int j = 0; j < P; ++j) b[j] = 0.0f;
      }
#pragma unroll
      for (int j = 0; j < P; ++j) v[j] = bias ? (v[j] - mu) * rs * w[j] + b[j] : v[j] * rs * w[j];
      store_vec<T, P>(o + c, v);
    }
    if (lane == 0) {
      if (mean) mean[n] = mu;
      rstd[n] = rs;
    }
  }
}

// dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), one warp per row.
// mean == nullptr: rmsnorm (no mean(dnorm) term).
template <typename T, int P>
__global__ void norm_backward_dinp_kernel(T* __restrict__ dinp, const T* __restrict__ dout,
                                          const T* __restrict__ inp, const T* __restrict__ weight,
                                          const float* __restrict__ mean,
                                          const float* __restrict__ rstd, int64_t N, int64_t C) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const float fc = static_cast<float>(C);
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; n < N;
       n += warps) {
    const T* x = inp + n * C;
    const T* g = dout + n * C;
    const float mu = mean ? mean[n] : 0.0f, rs = rstd[n];
    float sd = 0.0f, sdn = 0.0f;
    for (int64_t c = static_cast<int64_t>(lane) * P; c < C; c += 32 * P) {
      float xv[P], gv[P], wv[P];
      load_vec<T, P>(x + c, xv);
      load_vec<T, P>(g + c, gv);
      load_vec<T, P>(weight + c, wv);
#pragma unroll
      for (int j = 0; j < P; ++j) {
        const float dn = gv[j] * wv[j];
        sd += dn;
        sdn += dn * ((xv[j] - mu) * rs);
      }
    }
    const float a = mean ? warp_sum(sd) / fc : 0.0f;
    const float b = warp_sum(sdn) / fc;
    T* d = dinp + n * C;
    for (int64_t c = static_cast<int64_t>(lane) * P; c < C; c += 32 * P) {
      float xv[P], gv[P], wv[P], dv[P];
      load_vec<T, P>(x + c, xv);
      load_vec<T, P>(g + c, gv);
      load_vec<T, P>(weight + c, wv);
      load_vec<T, P>(d + c, dv);
#pragma unroll
      for (int j = 0; j < P; ++j) {
        const float norm = (xv[j] - mu) * rs;
        dv[j] = dv[j] + rs * (gv[j] * wv[j] - a - norm * b);
      }
      store_vec<T, P>(d + c, dv);
    }
  }
}

// Stage 1 of the parameter gradients. Block (32, 8): threadIdx.x picks V consecutive columns
// of the block's 32 * V-column tile (V = the 128-bit pack when rows are aligned, else 1),
// threadIdx.y strides the rows of chunk blockIdx.y ([n0, n1), `chunk` rows).
// partial[blockIdx.y][0][c] = sum dout * norm, partial[blockIdx.y][1][c] = sum dout, summed
// over the 8 row lanes in fixed order.
template <typename T, int V>
__global__ void norm_param_partial_kernel(float* __restrict__ partial, const T* __restrict__ dout,
                                          const T* __restrict__ inp, const float* __restrict__ mean,
                                          const float* __restrict__ rstd, int64_t N, int64_t C,
                                          int64_t chunk) {
  __shared__ float sw[8][32 * V + 1];
  __shared__ float sb[8][32 * V + 1];
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x) * V;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t n1 = n0 + chunk < N ? n0 + chunk : N;
  float aw[V], ab[V];
#pragma unroll
  for (int i = 0; i < V; ++i) aw[i] = ab[i] = 0.0f;
  if (c0 < C) {
    for (int64_t n = n0 + threadIdx.y; n < n1; n += 8) {
      const float mu = mean ? mean[n] : 0.0f, rs = rstd[n];
      if constexpr (V > 1) {
        const Pack128<T> g = load128(dout + n * C + c0), x = load128(inp + n * C + c0);
#pragma unroll
        for (int i = 0; i < V; ++i) {
          aw[i] += g.get(i) * ((x.get(i) - mu) * rs);
          ab[i] += g.get(i);
        }
      } else {
        const float g = ld(dout + n * C + c0);
        aw[0] += g * ((ld(inp + n * C + c0) - mu) * rs);
        ab[0] += g;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < V; ++i) {
    sw[threadIdx.y][threadIdx.x * V + i] = aw[i];
    sb[threadIdx.y][threadIdx.x * V + i] = ab[i];
  }
  __syncthreads();
  const int tid = threadIdx.y * 32 + threadIdx.x;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 * V + tid;
  if (tid < 32 * V && c < C) {
    float w = 0.0f, b = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      w += sw[k][tid];
      b += sb[k][tid];
    }
    float* p = partial + static_cast<int64_t>(blockIdx.y) * 2 * C;
    p[c] = w;
    p[C + c] = b;
  }
}

// Stage 2: grad[c] += sum over chunks of partial[k][which][c], chunks in order, in f64.
template <typename G>
__global__ void norm_param_sum_kernel(G* __restrict__ grad, const float* __restrict__ partial,
                                      int which, int64_t chunks, int64_t C) {
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < C;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double s = 0.0;
    for (int64_t k = 0; k < chunks; ++k) s += static_cast<double>(partial[(k * 2 + which) * C + c]);
    st(grad + c, ld(grad + c) + static_cast<float>(s));
  }
}

unsigned row_grid(int64_t N) {
  return grid_for(N, kRowBlock / 32);
}

template <typename T>
void launch_forward(const char* op, T* out, float* mean, float* rstd, const T* inp, const T* weight,
                    const T* bias, float eps, int64_t N, int64_t C) {
  if (N == 0) return;
  constexpr int P = Pack128<T>::size;
  if (packable<T>(C, {out, inp, weight, bias})) {
    norm_forward_kernel<T, P>
        <<<row_grid(N), kRowBlock, 0, stream()>>>(out, mean, rstd, inp, weight, bias, eps, N, C);
  } else {
    norm_forward_kernel<T, 1>
        <<<row_grid(N), kRowBlock, 0, stream()>>>(out, mean, rstd, inp, weight, bias, eps, N, C);
  }
  BRAID_CUDA_LAUNCHED(op);
}

// Shared backward of both norms. mean == nullptr selects rmsnorm.
template <typename T>
void norm_backward(const char* op, T* dinp, Tensor* dweight, Tensor* dbias, const T* dout,
                   const T* inp, const T* weight, const float* mean, const float* rstd, int64_t N,
                   int64_t C) {
  if (N == 0 || C == 0) return;
  if (dinp) {
    constexpr int P = Pack128<T>::size;
    if (packable<T>(C, {dinp, dout, inp, weight})) {
      norm_backward_dinp_kernel<T, P>
          <<<row_grid(N), kRowBlock, 0, stream()>>>(dinp, dout, inp, weight, mean, rstd, N, C);
    } else {
      norm_backward_dinp_kernel<T, 1>
          <<<row_grid(N), kRowBlock, 0, stream()>>>(dinp, dout, inp, weight, mean, rstd, N, C);
    }
    BRAID_CUDA_LAUNCHED(op);
  }
  if (!dweight && !dbias) return;
  // Row chunks: at least 32 rows each, at most 128 chunks (scratch 2 * chunks * C floats): stage
  // 2 reads the chunks of a column one after another, so more would make it latency-bound.
  int64_t chunks = ceil_div(N, 32);
  if (chunks > 128) chunks = 128;
  const int64_t chunk = ceil_div(N, chunks);
  chunks = ceil_div(N, chunk);
  Scratch partial(static_cast<size_t>(chunks * 2 * C) * sizeof(float));
  float* p = partial.as<float>();
  constexpr int P = Pack128<T>::size;
  const bool packed = packable<T>(C, {dout, inp});
  dim3 grid(static_cast<unsigned>(ceil_div(C, packed ? 32 * P : 32)),
            static_cast<unsigned>(chunks));
  if (packed) {
    norm_param_partial_kernel<T, P>
        <<<grid, dim3(32, 8), 0, stream()>>>(p, dout, inp, mean, rstd, N, C, chunk);
  } else {
    norm_param_partial_kernel<T, 1>
        <<<grid, dim3(32, 8), 0, stream()>>>(p, dout, inp, mean, rstd, N, C, chunk);
  }
  BRAID_CUDA_LAUNCHED(op);
  auto add = [&](Tensor& grad, int which) {
    dispatch_float(grad.dtype(), op, [&](auto gtag) {
      using G = decltype(gtag);
      norm_param_sum_kernel<G>
          <<<grid_for(C, 256), 256, 0, stream()>>>(ptr<G>(grad), p, which, chunks, C);
      BRAID_CUDA_LAUNCHED(op);
    });
  };
  if (dweight) add(*dweight, 0);
  if (dbias) add(*dbias, 1);
}

}  // namespace

void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, float eps) {
  const char* op = "layernorm_forward";
  check_cuda(op, {&out, &mean, &rstd, &inp, &weight, &bias});
  const int64_t N = rows_of(inp), C = cols_of(inp);  // checked by the ops.h entry
  dispatch_float(inp.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    launch_forward<T>(op, ptr<T>(out), ptr<float>(mean), ptr<float>(rstd), ptr<T>(inp),
                      ptr<T>(weight), ptr<T>(bias), eps, N, C);
  });
}

void layernorm_backward(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd) {
  const char* op = "layernorm_backward";
  check_cuda(op, {dinp, dweight, dbias, &dout, &inp, &weight, &mean, &rstd});
  const int64_t N = rows_of(inp), C = cols_of(inp);  // checked by the ops.h entry
  dispatch_float(inp.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    norm_backward<T>(op, dinp ? ptr<T>(*dinp) : nullptr, dweight, dbias, ptr<T>(dout), ptr<T>(inp),
                     ptr<T>(weight), ptr<float>(mean), ptr<float>(rstd), N, C);
  });
}

void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                     float eps) {
  const char* op = "rmsnorm_forward";
  check_cuda(op, {&out, &rstd, &inp, &weight});
  const int64_t N = rows_of(inp), C = cols_of(inp);  // checked by the ops.h entry
  dispatch_float(inp.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    launch_forward<T>(op, ptr<T>(out), nullptr, ptr<float>(rstd), ptr<T>(inp), ptr<T>(weight),
                      nullptr, eps, N, C);
  });
}

void rmsnorm_backward(Tensor* dinp, Tensor* dweight, const Tensor& dout, const Tensor& inp,
                      const Tensor& weight, const Tensor& rstd) {
  const char* op = "rmsnorm_backward";
  check_cuda(op, {dinp, dweight, &dout, &inp, &weight, &rstd});
  const int64_t N = rows_of(inp), C = cols_of(inp);  // checked by the ops.h entry
  dispatch_float(inp.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    norm_backward<T>(op, dinp ? ptr<T>(*dinp) : nullptr, dweight, nullptr, ptr<T>(dout),
                     ptr<T>(inp), ptr<T>(weight), nullptr, ptr<float>(rstd), N, C);
  });
}

}  // namespace braid::kernels::cuda
